"""``kneepoint worker``: one run shared by many GPUs through a PostgreSQL study, with the
same steps as ``kneepoint tune``."""
