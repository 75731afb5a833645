"""``python -m kneepoint``: the CLI where no ``kneepoint`` script is on the path (a package
put on PYTHONPATH, as on a lent GPU machine without network)."""

from kneepoint.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
