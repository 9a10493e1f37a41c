"""``python -m stratus``: the same as the ``stratus`` command (its completion too)."""

from stratus.cli.main import main

if __name__ == "__main__":
    main(prog_name="stratus")
