"""``python -m ember.testing --device foo [pytest args]``: the conformance suite on ``foo``."""

from __future__ import annotations

import argparse
import importlib.util
import sys

NO_PYTEST = ('python -m ember.testing runs the conformance suite on pytest, which is not '
             'installed here: pip install "ember[testing]" (or: pip install pytest)')


def main(argv: list[str] | None = None) -> int:
    if importlib.util.find_spec("pytest") is None:
        print(NO_PYTEST, file=sys.stderr)
        return 2
    import pytest

    parser = argparse.ArgumentParser(prog="python -m ember.testing", description=__doc__)
    parser.add_argument("--device", action="append", default=[],
                        help="device string (repeatable; default $EMBER_TEST_DEVICE, else ember's "
                             "default device: cpu where installed)")
    args, rest = parser.parse_known_args(argv)
    opts = [f"--ember-device={d}" for d in args.device]
    # warnings are errors, as in ember's own test runs (a later -W in ``rest`` overrides);
    # ember is imported before pytest starts here, so its plugin cannot be assert-rewritten
    return int(pytest.main(["--pyargs", "ember.testing.suite", "-q", "-p", "no:cacheprovider",
                            "-W", "error",
                            "-W", "ignore::pytest.PytestAssertRewriteWarning",
                            *opts, *rest]))


if __name__ == "__main__":
    sys.exit(main())
