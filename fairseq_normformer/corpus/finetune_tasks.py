"""Fine-tuning tasks in the official formats, built offline from the standard library's source
(``ast``), split train/valid/test by module as the pre-training corpus (``stdlib.split_of``):

- ``squad`` (SQuAD v1.1 JSON) and ``squad2`` (v2.0): a context is the docstrings of up to
  ``FUNCTIONS_PER_CONTEXT`` functions of one class or module, each as ``name(params): docstring``;
  "What does NAME return?" / "What does NAME raise?" are answered by the first sentence of NAME's
  docstring that starts with "Return" / "Raise". In ``squad2`` a function without such a sentence
  gives an unanswerable question (``is_impossible``).
- ``conll`` (CoNLL-2003 columns ``word POS chunk tag``, POS and chunk ``_``, BIO tags): docstring
  sentences, words and punctuation as tokens, with the names they mention tagged by the kind the
  syntax tree gives them: MOD (a standard-library module), CLASS, FUNC (defined in the module) and
  PARAM (a parameter of the documented function). A name counts when it looks like code (dotted,
  with an underscore or inner capital, or followed by "(") or is a parameter of that function.
- ``swag`` (SWAG's CSV columns): sent1 is a docstring sentence, sent2 the first ``SWAG_START_WORDS``
  words of the docstring's next sentence; the right ending is the rest of that sentence, the three
  others the rests of sentences drawn from other docstrings of the same split.
"""
import ast
import csv
import json
import random
import re
import sysconfig
from pathlib import Path

from ..runs.atomic import atomic_directory
from .stdlib import SPLIT_PERCENT, SPLITS, _definitions, docstring_paragraphs, sentences, split_of, stdlib_modules

FORMATS = ("squad", "squad2", "conll", "swag")
FUNCTIONS_PER_CONTEXT = 6
QUESTIONS = {"return": "Return", "raise": "Raise"}  # question verb: the answer sentence's first word
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
TOKEN = re.compile(r"\w+|[^\w\s]")


def functions_by_scope(tree) -> list:
    """[(scope name, [FunctionDef])]: the module's functions, then each class's methods."""
    scopes, classes = [("", [])], []
    for node in _definitions(tree.body):
        (classes if isinstance(node, ast.ClassDef) else scopes[0][1]).append(node)
    for cls in classes:
        scopes.append((cls.name, [n for n in _definitions(cls.body) if not isinstance(n, ast.ClassDef)]))
    return [(scope, [f for f in funcs if ast.get_docstring(f)]) for scope, funcs in scopes]


def documented_nodes(tree) -> list:
    """The module and every class and function in it: the nodes that may have a docstring."""
    kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [tree] + [n for n in ast.walk(tree) if isinstance(n, kinds)]


def parameters(function) -> list:
    a = function.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if p and p.arg not in ("self", "cls")]


# --- SQuAD ---------------------------------------------------------------------------------------
def squad_paragraphs(module: str, tree, unanswerable: bool) -> list:
    paragraphs, asked = [], set()  # asked: question ids so far
    for scope, functions in functions_by_scope(tree):
        for group in range(0, len(functions), FUNCTIONS_PER_CONTEXT):
            paragraph = squad_paragraph(module, scope, functions[group : group + FUNCTIONS_PER_CONTEXT], unanswerable)
            paragraph["qas"] = not_asked(paragraph["qas"], asked)
            if paragraph["qas"]:
                paragraphs.append(paragraph)
    return paragraphs


def not_asked(qas: list, asked: set) -> list:
    """The questions whose id is not in ``asked`` (which they join): a property's getter and setter
    share a name, and so would their questions' ids."""
    kept = []
    for qa in qas:
        if qa["id"] not in asked:
            asked.add(qa["id"])
            kept.append(qa)
    return kept


def squad_paragraph(module: str, scope: str, functions: list, unanswerable: bool) -> dict:
    context, qas = "", []
    for function in functions:
        name = f"{scope}.{function.name}" if scope else function.name
        header = f"{name}({', '.join(parameters(function))}): "
        text = " ".join(docstring_paragraphs(ast.get_docstring(function)))
        offset = len(context) + len(header)
        context += header + text + " "
        for verb, first_word in QUESTIONS.items():
            answer = next((s for s in sentences(text) if s.startswith(first_word)), None)
            if answer is None and not unanswerable:
                continue
            qa = {"id": f"{module}:{name}:{verb}", "question": f"What does {name} {verb}?",
                  "answers": [] if answer is None else [{"text": answer, "answer_start": offset + text.index(answer)}]}  # fmt: skip
            qas.append(qa | ({"is_impossible": answer is None} if unanswerable else {}))
    return {"context": context.rstrip(), "qas": qas}


# --- CoNLL ---------------------------------------------------------------------------------------
def module_names(modules) -> set:
    return {name for name, _ in modules}


def name_kind(name: str, followed_by_paren: bool, names: dict, params: set):
    """MOD/CLASS/FUNC/PARAM for a mentioned name, or None."""
    last = name.rsplit(".", 1)[-1]
    looks_like_code = "." in name or "_" in name or followed_by_paren or any(c.isupper() for c in name[1:])
    if name in names["modules"] and ("." in name or looks_like_code or len(name) > 3):
        return "MOD"
    if name in params:
        return "PARAM"
    if looks_like_code:
        return "CLASS" if last in names["classes"] else "FUNC" if last in names["functions"] else None
    return None


def tag_sentence(sentence: str, names: dict, params: set) -> list:
    """[(token, BIO tag)] of one sentence."""
    tags = {}  # character offset of a token -> tag
    for m in NAME.finditer(sentence):
        kind = name_kind(m.group(), sentence[m.end() : m.end() + 1] == "(", names, params)
        if kind:
            for i, t in enumerate(TOKEN.finditer(m.group())):
                tags[m.start() + t.start()] = ("B-" if i == 0 else "I-") + kind
    return [(t.group(), tags.get(t.start(), "O")) for t in TOKEN.finditer(sentence)]


def conll_sentences(tree, modules: set) -> list:
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = {"modules": modules, "classes": classes, "functions": functions}
    out = []
    for node in documented_nodes(tree):
        params = set(parameters(node)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
        for paragraph in docstring_paragraphs(ast.get_docstring(node) or ""):
            out += [tag_sentence(s, names, params) for s in sentences(paragraph)]
    return [s for s in out if s]


# --- SWAG ----------------------------------------------------------------------------------------
SWAG_START_WORDS = 2
SWAG_MIN_WORDS = 5  # both sentences of a pair
SWAG_COLUMNS = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                "ending0", "ending1", "ending2", "ending3", "label"]  # fmt: skip


def next_sentence_pairs(tree) -> list:
    """(sentence, next sentence) of every docstring, both of at least SWAG_MIN_WORDS words."""
    pairs = []
    for node in documented_nodes(tree):
        text = [s for p in docstring_paragraphs(ast.get_docstring(node) or "") for s in sentences(p)]
        pairs += [(a, b) for a, b in zip(text, text[1:]) if min(len(a.split()), len(b.split())) >= SWAG_MIN_WORDS]
    return pairs


def write_swag(pairs: list, path: Path, rng: random.Random):
    """SWAG rows: the true next sentence's rest at a random position among three distractors."""
    if len(pairs) < 4:
        raise ValueError(f"{path.name}: {len(pairs)} sentence pairs, SWAG needs at least 4: raise --max-chars")
    rests = [" ".join(b.split()[SWAG_START_WORDS:]) for _, b in pairs]
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SWAG_COLUMNS)
        for k, (a, b) in enumerate(pairs):
            endings = [rests[d] for d in rng.sample([d for d in range(len(pairs)) if d != k], 3)]
            label = rng.randrange(4)
            endings.insert(label, rests[k])
            start = " ".join(b.split()[:SWAG_START_WORDS])
            writer.writerow([f"stdlib-{k}", k, f"{a} {start}", a, start, "gold", *endings, label])


# --- Build ---------------------------------------------------------------------------------------
def parse(path):
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):  # e.g. a file written for another Python version
        return None


def build_examples(fmt: str, max_chars, seed: int) -> dict:
    """{split: [SQuAD paragraph] or [tagged sentence]}, modules in sorted order; max_chars is shared
    90/5/5 as by the corpus (a module is parsed only while its split has room)."""
    modules = stdlib_modules(sysconfig.get_paths()["stdlib"])
    budget = {s: None if max_chars is None else max_chars * SPLIT_PERCENT[s] // 100 for s in SPLITS}
    examples, used = {s: [] for s in SPLITS}, {s: 0 for s in SPLITS}
    for module, path in modules:
        split = split_of(module, seed)
        if (budget[split] is not None and used[split] >= budget[split]) or (tree := parse(path)) is None:
            continue
        if fmt == "conll":
            items, size = conll_sentences(tree, module_names(modules)), lambda s: sum(len(t) + 1 for t, _ in s)
        elif fmt == "swag":
            items, size = next_sentence_pairs(tree), lambda pair: len(pair[0]) + len(pair[1])
        else:
            items = [p | {"module": module} for p in squad_paragraphs(module, tree, unanswerable=fmt == "squad2")]
            size = lambda p: len(p["context"])  # noqa: E731
        for item in items:
            if budget[split] is None or used[split] < budget[split]:
                examples[split].append(item)
                used[split] += size(item)
    return examples


def write_squad(paragraphs: list, path: Path, version: str):
    articles = {}
    for p in paragraphs:
        articles.setdefault(p.pop("module"), []).append(p)
    data = [{"title": module, "paragraphs": ps} for module, ps in articles.items()]
    path.write_text(json.dumps({"version": version, "data": data}, indent=1) + "\n", encoding="utf-8")


def write_conll(tagged: list, path: Path):
    lines = ["-DOCSTART- -X- -X- O", ""]
    for sentence in tagged:
        lines += [f"{token} _ _ {tag}" for token, tag in sentence] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_finetune_data(out_dir, fmt: str, max_chars=None, seed=0) -> dict:
    """Write out_dir/{train,valid,test}.json (squad, squad2), .conll, or {train,val,test}.csv (swag,
    SWAG's names); returns counts per split.
    ``out_dir`` must not exist; it appears complete or not at all."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; remove it or choose another directory")
    examples, rng = build_examples(fmt, max_chars, seed), random.Random(seed)
    counts = {}
    with atomic_directory(out_dir) as tmp:
        for split, items in examples.items():
            if fmt == "swag":
                write_swag(items, tmp / f"{'val' if split == 'valid' else split}.csv", rng)
                counts[split] = {"examples": len(items)}
            elif fmt == "conll":
                write_conll(items, tmp / f"{split}.conll")
                counts[split] = {"sentences": len(items), "entities": sum(t.startswith("B-") for s in items for _, t in s)}
            else:
                counts[split] = {"contexts": len(items), "questions": sum(len(p["qas"]) for p in items)}
                write_squad(items, tmp / f"{split}.json", "v2.0" if fmt == "squad2" else "1.1")
    return counts
