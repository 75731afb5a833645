"""kneepoint: an autonomous tuning agent for LLM serving engines (vLLM first).

The package is one import namespace: ``records`` (typed data at every boundary), ``config``
(YAML files into validated records), ``agent`` (the loop and CLI), ``probes`` (everything with
side effects), ``policies`` (pure decisions) and ``sim`` (the embedded engine simulator).
"""

__version__ = "0.1.0"
