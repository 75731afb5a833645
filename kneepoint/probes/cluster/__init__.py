"""GPUs of a Ray cluster as a tuning run's pool (``pip install 'kneepoint[ray]'``): import this
package only where Ray is installed (``kneepoint tune --gpus`` / ``--ray``)."""

from kneepoint.probes.cluster.ray_pool import RayPool

__all__ = ["RayPool"]
