"""Runs ../ep_train.py the way research code runs a library that is not installed: the
script puts the library's folder on sys.path itself, then imports it inside a function, so
`cumemtrace run --phase ...=ep_train:EPTrainer...` targets a module that cannot be imported
when the interpreter starts."""
import os
import sys


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import ep_train
    sys.argv = [ep_train.__file__] + sys.argv[1:]
    return ep_train.main()


if __name__ == "__main__":
    sys.exit(main())
