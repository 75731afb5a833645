"""kneepoint: an autonomous tuning agent for LLM serving engines (vLLM first).

One package a concept (docs/development.md's Layout table), each naming its public API in its
``__init__`` (its face, ``__all__``); a module reaches another package only through that face
(tests/test_architecture.py): ``records`` (typed data at every boundary), ``config`` (YAML
files into records), ``load`` and ``physics`` (pure load arithmetic and engine physics),
``policies`` (pure decisions), ``probes`` (everything with side effects), ``measure`` (how one
configuration is measured), ``tune`` (the loop), ``run`` (a run's record), ``report``,
``planning``, ``calibration``, ``sim`` (the embedded engine simulator) and ``cli``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
