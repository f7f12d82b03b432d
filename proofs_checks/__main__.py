"""``python -m proofs_checks [prefix]``: run the checks, print a table, exit 1 on any failure."""

import sys

from .result import run_all


def main() -> int:
    prefix = sys.argv[1] if len(sys.argv) > 1 else ""
    results = run_all(prefix)
    for r in results:
        print(r.row())
        if r.note:
            print(f"{'':8}note: {r.note}")
    failed = [r.label for r in results if not r.passed]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
