"""``kneepoint worker``: one run shared by many GPUs through a PostgreSQL study, with the
same steps as ``kneepoint tune``."""

from kneepoint.workers.shared_study import SharedStudy, StudyNotFoundError, published_start
from kneepoint.workers.storage import SharedStudyError
from kneepoint.workers.worker import Worker

__all__ = [
    "SharedStudy",
    "SharedStudyError",
    "StudyNotFoundError",
    "Worker",
    "published_start",
]
