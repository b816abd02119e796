"""normformer-user-dir: print the absolute path to pass to fairseq's ``--user-dir``.

    fairseq-train data-bin --user-dir "$(normformer-user-dir)" --arch normformer_lm ...

It is the directory of the installed ``fairseq_normformer`` package (an editable install's source
tree or a copy in site-packages alike).
"""
import argparse
from pathlib import Path


def user_dir() -> Path:
    return Path(__file__).resolve().parent.parent  # fairseq_normformer/


def main(argv=None):
    argparse.ArgumentParser(prog="normformer-user-dir", description=__doc__.split("\n")[0]).parse_args(argv)
    print(user_dir())


if __name__ == "__main__":
    main()
