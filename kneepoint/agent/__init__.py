"""The tuning loop and everything a person runs: the loop's decisions (``decide``) and their
executor (``loop``), the steps that measure through the bench, the run folder and its ledger
(resume from any point), budgets and deadlines, the console and the reports, and the CLI."""
