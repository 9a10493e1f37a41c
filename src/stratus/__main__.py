"""``python -m stratus``: the same as the ``stratus`` command."""

from stratus.cli.main import main

if __name__ == "__main__":
    main()
