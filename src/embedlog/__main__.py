"""``python -m embedlog``: the command line."""

from embedlog.cli import main

if __name__ == "__main__":
    main()
