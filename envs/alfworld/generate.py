"""Pre-generate a split of ALFWorld games into the cache and print games/s.

    python -m envs.alfworld.generate --split train --size small
"""

from __future__ import annotations

from rich.progress import Progress

from envs.alfworld.games import GeneratedGames, default_cache_dir
from envs.alfworld.generator import SIZES, SPLIT_SIZES
from envs.common.cli_args import ArgumentParser, check_order, integer


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", required=True, choices=sorted(SPLIT_SIZES), help="which split to generate")
    parser.add_argument("--size", default="alfred", choices=sorted(SIZES),
                        help="room size: alfred (ALFRED scale, default), medium, small, tiny (CPU quickstart)")
    parser.add_argument("--cache-dir", default=None, help=f"cache root (default {default_cache_dir()})")
    parser.add_argument("--start", type=integer(0), default=0, help="first index to generate")
    parser.add_argument("--end", type=integer(1), default=None, help="one past the last index (default: the whole split)")
    args = parser.parse_args(argv)
    if args.end is not None and args.end > SPLIT_SIZES[args.split]:
        parser.error(f"argument --end: {args.end} is beyond split {args.split}'s {SPLIT_SIZES[args.split]} games")
    check_order(parser, "--start", args.start, "--end", SPLIT_SIZES[args.split] if args.end is None else args.end)
    games = GeneratedGames(args.cache_dir, args.size)
    end = SPLIT_SIZES[args.split] if args.end is None else args.end
    with Progress() as progress:
        bar = progress.add_task(f"{args.split} ({args.size})", total=end - args.start)
        stats = games.generate_split(args.split, args.start, end, progress=lambda _: progress.advance(bar))
    print(f"generated {stats['games']} games in {stats['seconds']:.1f} s: {stats['games_per_s']:.1f} games/s "
          f"-> {games.split_dir(args.split)}")
    return stats


if __name__ == "__main__":
    main()
