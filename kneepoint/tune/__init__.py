"""The one tuning loop: pure decisions over a closed set of actions (``decide``), their
executor (``loop``), the steps that measure through ``kneepoint.measure``, proposers,
budgets, deadlines and the checks a study passes before anything starts."""
