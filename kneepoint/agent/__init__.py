"""The tuning loop and its command line: study state, ledger, budget, escalation, resume,
reports. Today it holds the CLI and logging set-up; the loop arrives in later steps."""
