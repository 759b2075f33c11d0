"""Command line: ``python -m textkit.cli top FILE -n 5`` or ``stats FILE``."""

import argparse
import sys
from pathlib import Path

from textkit.stats import mean_word_length, reading_time_minutes, top_words


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="textkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    top = sub.add_parser("top", help="most frequent words")
    top.add_argument("file")
    top.add_argument("-n", type=int, default=10)
    stats = sub.add_parser("stats", help="length and reading time")
    stats.add_argument("file")
    args = parser.parse_args(argv)
    text = Path(args.file).read_text(encoding="utf-8")
    if args.command == "top":
        for word, count in top_words(text, args.n):
            print(f"{count:6d}  {word}")
    else:
        print(f"mean word length: {mean_word_length(text):.2f}")
        print(f"reading time: {reading_time_minutes(text)} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
