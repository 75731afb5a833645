"""The one tuning loop: pure decisions over a closed set of actions (``decide``), their
executor (``loop``), the steps that measure through the bench, proposers, budgets, deadlines
and the checks a study passes before anything starts."""
