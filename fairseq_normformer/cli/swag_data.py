"""normformer-swag-data: SWAG's CSVs to the binarized data of fairseq's ``sentence_ranking`` task.

    normformer-swag-data SWAG_DIR --spm-model SPM --dict DICT --out OUT

SWAG_DIR holds train.csv and val.csv (SWAG's release, or normformer-build-corpus --format swag);
they are tokenized with the pre-training SentencePiece model and binarized with its dictionary
into OUT/input0 (the contexts), OUT/input1..4 (the choices) and OUT/label (data/swag.py). Then:
fairseq-train OUT --task sentence_ranking --criterion sentence_ranking --num-classes 4 --init-token 0
(docs/finetuning.md).
"""
import argparse
from pathlib import Path

from ..data.swag import write_ranking_data


def main(argv=None):
    parser = argparse.ArgumentParser(prog="normformer-swag-data", description=__doc__.split("\n")[0])
    parser.add_argument("swag_dir", type=Path, help="directory with SWAG's train.csv and val.csv")
    parser.add_argument("--spm-model", type=Path, required=True, help="the pre-training SentencePiece model")
    parser.add_argument("--dict", type=Path, required=True, help="the pre-training dict.txt")
    parser.add_argument("--out", type=Path, required=True, help="output directory (must not exist)")
    args = parser.parse_args(argv)
    try:
        counts = write_ranking_data(args.swag_dir, args.spm_model, args.dict, args.out)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        raise SystemExit(f"normformer-swag-data: error: {e}")
    print(f"sentence_ranking data in {args.out}: " + ", ".join(f"{s} {n} examples" for s, n in counts.items()))


if __name__ == "__main__":
    main()
