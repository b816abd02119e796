"""normformer-embed: contextual embeddings (Jurafsky & Martin ch. 11.3; BERT §5.4, Table 7) of text
lines from a masked LM (``normformer_roberta``, ``normformer_bert``) or a causal LM (``normformer_lm``).

    normformer-embed CHECKPOINT INPUT OUT_DIR --spm-model spm.model [--data DATA_BIN]
                     [--layer N | --last-four {sum,concat}] [--pool {first,mean}]

Each line of INPUT is encoded with the SentencePiece model and the checkpoint's dictionary and run
through the model alone: an encoder reads ``<s> pieces </s>`` ([CLS] ... [SEP]); a causal LM reads
``</s> pieces``, the end-of-line symbol that precedes every line in its training stream. Layers are
fairseq's inner states: 0 = the embeddings (after positions and any embedding LayerNorm), i = the
output of layer i, and the last one is the model's output features (after the final LayerNorm of a
Pre-LN model, what the LM head reads). ``--last-four`` sums or concatenates the last four layers.
A word is a SentencePiece piece starting with "▁" plus its continuation pieces (the line's
whitespace-separated words); its vector is its first piece's (``first``) or their mean (``mean``).

OUT_DIR (which must not exist or be empty; written whole or not at all) receives
    tokens.npy  (pieces, dim) float32     tokens.tsv  line, token, word, piece (one row per vector)
    words.npy   (words, dim) float32      words.tsv   line, word, text
Lines are numbered from 1, tokens and words from 0 within their line; empty lines give no rows.
"""
import argparse
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import numpy as np
import sentencepiece as spm
import torch
from fairseq import checkpoint_utils

from ..models.normformer_lm import NormFormerLanguageModel
from ..models.normformer_roberta import NormFormerRobertaModel
from ..runs.atomic import atomic_directory

logger = logging.getLogger("normformer_embed")

WORD_START = "\u2581"  # SentencePiece's "▁"
LAST_FOUR = 4  # BERT's Table 7: the last four hidden layers


@dataclass
class Embeddings:
    tokens: List[np.ndarray] = field(default_factory=list)
    token_rows: List[tuple] = field(default_factory=list)  # (line, token, word, piece)
    words: List[np.ndarray] = field(default_factory=list)
    word_rows: List[tuple] = field(default_factory=list)  # (line, word, text)


def load(checkpoint: Path, data=None):
    """(model in eval mode, dictionary) of a normformer_roberta/normformer_bert/normformer_lm checkpoint."""
    if not Path(checkpoint).is_file():
        raise FileNotFoundError(f"checkpoint {checkpoint} not found")
    overrides = {"data": str(data)} if data else {}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides=overrides)
    model = models[0]
    if not isinstance(model, (NormFormerRobertaModel, NormFormerLanguageModel)):
        raise ValueError(f"{checkpoint} holds a {type(model).__name__}; expected normformer_roberta, "
                         "normformer_bert or normformer_lm")  # fmt: skip
    return model.eval(), task.source_dictionary


def hidden_states(model, tokens: torch.Tensor) -> List[torch.Tensor]:
    """States 0..L of one sequence (1, T) as (T, C): fairseq's inner states, the last replaced by the
    output features (which add a Pre-LN model's final LayerNorm)."""
    with torch.no_grad():
        if isinstance(model, NormFormerLanguageModel):
            features, extra = model(tokens, features_only=True)
        else:
            features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    states = [s[:, 0] for s in extra["inner_states"][:-1]]  # (T, 1, C) -> (T, C)
    return states + [features[0]]


def select_layers(states: List[torch.Tensor], layer=None, last_four=None) -> torch.Tensor:
    """One layer (``layer``: 0..L, negative counts from the end), or the sum/concatenation of the last four."""
    top = len(states) - 1
    if last_four:
        if top < LAST_FOUR:
            raise ValueError(f"--last-four needs at least {LAST_FOUR} layers; this model has {top}")
        last = states[-LAST_FOUR:]
        return torch.stack(last).sum(0) if last_four == "sum" else torch.cat(last, dim=-1)
    if not -top - 1 <= layer <= top:
        raise ValueError(f"--layer {layer} is out of range: this model has layers 0 (embeddings) to {top} (output)")
    return states[layer]


def word_spans(pieces: List[str]) -> List[range]:
    """Token ranges of the words: a piece starting with "▁" (or the line's first piece) starts one."""
    starts = [i for i, p in enumerate(pieces) if i == 0 or p.startswith(WORD_START)]
    return [range(s, e) for s, e in zip(starts, starts[1:] + [len(pieces)])]


def sequence(model, dictionary, pieces: List[str]) -> torch.Tensor:
    """(1, T) ids: <s> pieces </s> for an encoder, </s> pieces for a causal LM."""
    ids = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=False).tolist()
    if isinstance(model, NormFormerLanguageModel):
        return torch.tensor([[dictionary.eos()] + ids])
    return torch.tensor([[dictionary.bos()] + ids + [dictionary.eos()]])


def embed_lines(model, dictionary, sp, lines, layer=None, last_four=None, pool="first") -> Embeddings:
    out, first = Embeddings(), 1  # the index of the first text token (after <s> or </s>)
    max_len = model.max_positions()
    for number, line in enumerate(lines, start=1):
        pieces = sp.encode(line.strip(), out_type=str)
        if not pieces:
            continue
        tokens = sequence(model, dictionary, pieces)
        if tokens.size(1) > max_len:
            raise ValueError(f"line {number} has {tokens.size(1)} tokens with the special symbols; "
                             f"the model takes at most {max_len}")  # fmt: skip
        vectors = select_layers(hidden_states(model, tokens), layer, last_four)[first : first + len(pieces)]
        vectors = vectors.float().numpy()
        for w, span in enumerate(word_spans(pieces)):
            out.token_rows += [(number, t, w, pieces[t]) for t in span]
            out.words.append(vectors[span.start] if pool == "first" else vectors[span.start : span.stop].mean(0))
            out.word_rows.append((number, w, "".join(pieces[t] for t in span).replace(WORD_START, "")))
        out.tokens.append(vectors)
    if not out.tokens:
        raise ValueError("the input has no text (only empty lines)")
    return out


def write_tsv(path: Path, header, rows):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")


def write(out_dir: Path, emb: Embeddings):
    with atomic_directory(out_dir) as tmp:
        np.save(tmp / "tokens.npy", np.concatenate(emb.tokens).astype(np.float32))
        np.save(tmp / "words.npy", np.stack(emb.words).astype(np.float32))
        write_tsv(tmp / "tokens.tsv", ("line", "token", "word", "piece"), emb.token_rows)
        write_tsv(tmp / "words.tsv", ("line", "word", "text"), emb.word_rows)


def get_parser():
    p = argparse.ArgumentParser(prog="normformer-embed", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path, help="normformer_roberta, normformer_bert or normformer_lm checkpoint")
    p.add_argument("input", type=Path, help="text, one sequence per line ('-': stdin)")
    p.add_argument("out_dir", type=Path, help="directory to write (must not exist or be empty)")
    p.add_argument("--spm-model", type=Path, required=True, help="the corpus's SentencePiece model")
    p.add_argument("--data", help="the data directory holding dict.txt, if it moved since training")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--layer", type=int, default=-1, help="0 = embeddings, ..., L = output (default: -1, the output)")
    which.add_argument("--last-four", choices=("sum", "concat"), help="sum or concatenate the last four layers")
    p.add_argument("--pool", choices=("first", "mean"), default="first", help="word vector: first sub-word or mean")
    return p


def main(argv=None):
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = get_parser().parse_args(argv)
    try:
        if not args.spm_model.is_file():
            raise FileNotFoundError(f"SentencePiece model {args.spm_model} not found (the corpus's spm.model)")
        if args.out_dir.exists() and any(args.out_dir.iterdir()):
            raise FileExistsError(f"{args.out_dir} exists and is not empty; choose another directory")
        text = sys.stdin.read() if str(args.input) == "-" else args.input.read_text(encoding="utf-8")
        lines = text.splitlines()
        model, dictionary = load(args.checkpoint, args.data)
        sp = spm.SentencePieceProcessor(model_file=str(args.spm_model))
        emb = embed_lines(model, dictionary, sp, lines, args.layer, args.last_four, args.pool)
        write(args.out_dir, emb)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        sys.exit(f"normformer-embed: error: {e}")
    dim = emb.tokens[0].shape[1]
    print(f"{len(emb.token_rows)} token and {len(emb.word_rows)} word vectors of dimension {dim} -> {args.out_dir}")


if __name__ == "__main__":
    main()
