"""normformer-convert-fairseq-lm SRC DST: a fairseq ``transformer_lm`` checkpoint as a ``normformer_lm`` one,
or a fairseq ``transformer`` (translation) checkpoint as a ``normformer_transformer`` one."""
import argparse
import logging

from ..models.fairseq_compat import convert_checkpoint
from ..modules.operations import SWITCHES


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("src", help="checkpoint written by fairseq's transformer_lm or transformer")
    parser.add_argument("dst", help="where to write the converted checkpoint (must not exist)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s | %(message)s")
    try:
        cfg = convert_checkpoint(args.src, args.dst)
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    switches = {op.field: cfg[op.field] for op in SWITCHES}
    print(f"wrote {args.dst}: {cfg['_name']} with head_scale_position={cfg['head_scale_position']}, {switches}")


if __name__ == "__main__":
    main()
