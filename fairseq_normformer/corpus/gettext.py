"""A real parallel corpus that needs no download: the gettext message catalogues of installed programs.

Every compiled catalogue ``<locale dir>/<lang>/LC_MESSAGES/<domain>.mo`` pairs English messages
(msgid) with their translations (msgstr). ``build_translation_corpus(out_dir, source_lang="en",
target_lang="de")`` reads them, cleans the pairs, splits train/valid/test by catalogue, trains one
SentencePiece model on both languages' train text and binarizes with ``fairseq-preprocess
--joined-dictionary`` (so ``--share-all-embeddings`` works). Layout of ``out_dir``::

    raw/{train,valid,test}.{src,tgt}     text, one message a line, line i of .src translated by line i of .tgt
    spm.model, spm.vocab                 joint SentencePiece model (trained on both train files)
    pieces/{train,valid,test}.{src,tgt}  the same as pieces
    data-bin/                            fairseq-preprocess output: dict.{src,tgt}.txt (identical),
                                         {split}.{src}-{tgt}.{src,tgt}.bin/.idx
    corpus.json                          settings and statistics; written last, marks the build complete
"""
import hashlib
import re
import struct
from collections import defaultdict
from pathlib import Path

from .pipeline import (
    SPLITS,
    CorpusPaths,
    build_or_reuse,
    corpus_paths,
    encode_splits,
    fairseq_preprocess,
    train_sentencepiece,
    vocabulary_sizes,
)

SOURCE_OF_MSGIDS = "en"  # gettext's msgids are the programs' English messages
DEFAULT_LOCALE_DIR = "/usr/share/locale"
MIN_PAIRS = {"train": 100, "valid": 10, "test": 10}  # fewer: "too little text"
HELD_OUT_SHARE = 0.05  # valid and test: about 5% of the pairs each (whole catalogues) ...
MAX_HELD_OUT_PAIRS = 2500  # ... and at most this many, so that validation stays quick
MO_MAGIC = 0x950412DE
# printf (%s, %-10.3ld, %1$s, %%), Python (%(name)s) and brace ({0}, {name}) placeholders
FORMAT_SPEC = re.compile(r"%(?:\(\w+\))?[-+ #0'I]*(?:\d+\$)?\*?\d*(?:\.\*?\d+)?(?:hh|h|ll|l|L|q|j|z|t)?[a-zA-Z%]|\{\w*\}")
CONTEXT_SEPARATOR = "\x04"  # msgctxt EOT msgid
PLURAL_SEPARATOR = "\x00"  # msgid NUL msgid_plural; msgstr[0] NUL msgstr[1] ...


# --- Reading catalogues ----------------------------------------------------------------------------
def _charset(header: bytes) -> str:
    match = re.search(rb"charset=([\w.-]+)", header)
    return match.group(1).decode("ascii") if match else "utf-8"


def read_mo(path) -> list:
    """[(msgid, msgstr)] of a compiled catalogue, in file order, decoded with the header's charset
    (the .mo format: magic, revision, count, offsets of the original and translation tables, each
    a (length, offset) per string). Plural entries keep gettext's NUL separators, context its EOT."""
    data = Path(path).read_bytes()
    for order in "<>":
        if len(data) >= 20 and struct.unpack(order + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise ValueError(f"{path} is not a compiled gettext catalogue (bad magic number)")
    count, originals, translations = struct.unpack(order + "3I", data[8:20])

    def strings(table):
        for i in range(count):
            length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
            yield data[offset : offset + length]

    raw = list(zip(strings(originals), strings(translations)))
    charset = next((_charset(msgstr) for msgid, msgstr in raw if msgid == b""), "utf-8")
    return [(i.decode(charset, "replace"), s.decode(charset, "replace")) for i, s in raw if i]


def message_pairs(msgid: str, msgstr: str) -> list:
    """Sentence pairs of one catalogue entry: the context dropped; a plural entry gives (singular,
    msgstr[0]) and (plural, msgstr[1]); a multi-line message is split into its lines when both sides
    have as many, else joined. Whitespace is collapsed; untranslated forms are dropped."""
    msgid = msgid.split(CONTEXT_SEPARATOR, 1)[-1]
    pairs = list(zip(msgid.split(PLURAL_SEPARATOR), msgstr.split(PLURAL_SEPARATOR)))  # forms beyond 2 unpaired
    lines = []
    for source, target in pairs:
        src_lines, tgt_lines = source.strip().splitlines(), target.strip().splitlines()
        lines += zip(src_lines, tgt_lines) if len(src_lines) == len(tgt_lines) else [(source, target)]
    return [(" ".join(s.split()), " ".join(t.split())) for s, t in lines]


def is_text(source: str, target: str) -> bool:
    """A pair worth learning from: both sides non-empty, the source has letters outside its format
    placeholders (not '%s: %s'), and the target is not a copy of the source (names, untranslated)."""
    return bool(source and target) and any(c.isalpha() for c in FORMAT_SPEC.sub("", source)) and source != target


def catalogues(locale_dir, lang: str) -> list:
    """The .mo files of ``lang`` (e.g. de; regional variants such as de_CH are other languages), sorted."""
    return sorted((Path(locale_dir) / lang / "LC_MESSAGES").glob("*.mo"))


def available_languages(locale_dir) -> list:
    return sorted(p.name for p in Path(locale_dir).iterdir() if catalogues(locale_dir, p.name))


# --- Splitting and cleaning ------------------------------------------------------------------------
def _stable_hash(domain: str, seed: int) -> bytes:
    return hashlib.sha256(f"{seed}:{domain}".encode()).digest()


def catalogue_pairs(locale_dir, lang: str, seed: int, max_words) -> dict:
    """{domain: [(English, lang)]}, the catalogues in a stable order (a hash of the domain salted
    with ``seed``). Each English message is kept once in the whole corpus (in the first catalogue
    that has it), so no message is in two splits; pairs whose English side has more than
    ``max_words`` words are dropped (None: all kept)."""
    order = sorted(catalogues(locale_dir, lang), key=lambda path: _stable_hash(path.stem, seed))
    by_domain, seen = {}, set()
    for path in order:
        by_domain[path.stem] = []
        for msgid, msgstr in read_mo(path):
            for pair in message_pairs(msgid, msgstr):
                too_long = max_words is not None and len(pair[0].split()) > max_words
                if is_text(*pair) and not too_long and pair[0] not in seen:
                    seen.add(pair[0])
                    by_domain[path.stem].append(pair)
    return by_domain


def held_out_size(total_pairs: int) -> int:
    """The most pairs valid (and test) may hold: HELD_OUT_SHARE of the corpus, at most MAX_HELD_OUT_PAIRS."""
    return min(round(HELD_OUT_SHARE * total_pairs), MAX_HELD_OUT_PAIRS)


def assign_splits(sizes: dict) -> dict:
    """{domain: split}: walking the catalogues in order, each goes whole to valid if it still fits
    there under ``held_out_size``, else to test if it fits there, else to train. Catalogues range
    from 8 to 9,000 pairs, so a hash alone gives uneven splits; this fills valid and test to about
    5% each with the small ones."""
    limit, held = held_out_size(sum(sizes.values())), {"valid": 0, "test": 0}
    splits = {}
    for domain, size in sizes.items():
        splits[domain] = next((split for split in held if held[split] + size <= limit), "train")
        if splits[domain] in held:
            held[splits[domain]] += size
    return splits


def split_pairs(locale_dir, lang: str, seed: int, max_words) -> dict:
    """{split: [(domain, (English, lang))]}: ``catalogue_pairs`` divided by ``assign_splits``."""
    by_domain = catalogue_pairs(locale_dir, lang, seed, max_words)
    splits = assign_splits({domain: len(pairs) for domain, pairs in by_domain.items()})
    by_split = defaultdict(list)
    for domain, pairs in by_domain.items():
        by_split[splits[domain]] += [(domain, pair) for pair in pairs]
    return by_split


def _write_text(by_split: dict, raw_dir: Path, langs: tuple, reverse: bool) -> dict:
    raw_dir.mkdir(parents=True)
    stats = {}
    for split in SPLITS:
        items = by_split.get(split, [])
        if len(items) < MIN_PAIRS[split]:
            raise ValueError(
                f"too little text: the {split} split has {len(items)} sentence pairs, fewer than "
                f"{MIN_PAIRS[split]} (too few catalogues for {langs[0]}-{langs[1]}, or max_words too small)"
            )
        sides = list(zip(*(pair[::-1] if reverse else pair for _, pair in items)))
        stats[split] = {"catalogues": len({domain for domain, _ in items}), "pairs": len(items)}
        for lang, lines in zip(langs, sides):
            (raw_dir / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            stats[split][f"words.{lang}"] = sum(len(line.split()) for line in lines)
    return stats


# --- Build -------------------------------------------------------------------------------------
def _build(tmp: Path, settings: dict, workers: int) -> dict:
    paths, src, tgt = corpus_paths(tmp), settings["source_lang"], settings["target_lang"]
    other = tgt if src == SOURCE_OF_MSGIDS else src
    by_split = split_pairs(settings["locale_dir"], other, settings["seed"], settings["max_words"])
    stats = _write_text(by_split, paths.raw_dir, (src, tgt), reverse=src != SOURCE_OF_MSGIDS)
    train_files = [paths.raw_dir / f"train.{lang}" for lang in (src, tgt)]
    train_sentencepiece(train_files, tmp / "spm", settings["vocab_size"], settings["seed"])
    pieces = encode_splits(tmp, [f"{split}.{lang}" for split in SPLITS for lang in (src, tgt)])
    for split in SPLITS:
        stats[split].update({f"pieces.{lang}": pieces[f"{split}.{lang}"] for lang in (src, tgt)})
    language_args = ["--source-lang", src, "--target-lang", tgt, "--joined-dictionary"]
    fairseq_preprocess(tmp / "pieces", paths.data_bin, workers, language_args)
    return {**stats, **vocabulary_sizes(paths, f"dict.{src}.txt")}


def check_language_pair(locale_dir, source_lang: str, target_lang: str):
    """A clear error unless one side is English (the msgids) and the other has catalogues."""
    if SOURCE_OF_MSGIDS not in (source_lang, target_lang) or source_lang == target_lang:
        raise ValueError(
            f"unknown language pair {source_lang}-{target_lang}: gettext catalogues pair English (msgid) "
            f"with one other language, so one side must be {SOURCE_OF_MSGIDS} and the other not"
        )
    other = target_lang if source_lang == SOURCE_OF_MSGIDS else source_lang
    if not Path(locale_dir).is_dir():
        raise ValueError(f"locale directory {locale_dir} does not exist")
    if not catalogues(locale_dir, other):
        found = available_languages(locale_dir)
        raise ValueError(
            f"no catalogues for {other}: {Path(locale_dir) / other / 'LC_MESSAGES'} holds no .mo files; "
            f"languages with catalogues here: {', '.join(found) or 'none'}"
        )


def build_translation_corpus(out_dir, *, source_lang="en", target_lang="de", locale_dir=DEFAULT_LOCALE_DIR,
                             vocab_size=8000, max_words=None, seed=0, workers=1) -> CorpusPaths:  # fmt: skip
    """Build (or reuse, when ``out_dir`` holds a complete corpus with the same settings) the gettext
    translation corpus of ``source_lang``-``target_lang``. Never writes into an existing non-empty
    ``out_dir``."""
    check_language_pair(locale_dir, source_lang, target_lang)
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    if max_words is not None and max_words < 1:
        raise ValueError(f"max_words must be at least 1 (or None for all), got {max_words}")
    settings = {"format": "translation", "source_lang": source_lang, "target_lang": target_lang,
                "locale_dir": str(Path(locale_dir).absolute()), "vocab_size": vocab_size,
                "max_words": max_words, "seed": seed,
                "held_out": f"valid and test: whole catalogues, each split at most {HELD_OUT_SHARE:.0%} "
                            f"and {MAX_HELD_OUT_PAIRS} pairs"}  # fmt: skip
    return build_or_reuse(out_dir, settings, lambda tmp: _build(tmp, settings, workers))
