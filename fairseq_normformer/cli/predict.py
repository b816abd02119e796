"""normformer-predict: predictions of a fine-tuned checkpoint, in the tasks' official formats.

    normformer-predict qa CHECKPOINT SQUAD.json --out PREDICTIONS.json [--tune-threshold] [--null-threshold X]
        SQuAD predictions {question id: answer text} ("" = no answer); for v2.0 also the null odds
        (--null-odds-out). With gold answers in the file it prints EM and F1; --tune-threshold
        chooses the v2.0 no-answer threshold that maximises F1 on this file (use the dev set).
    normformer-predict tags CHECKPOINT FILE.conll --out PREDICTIONS.conll
        CoNLL lines ``word gold predicted`` and the entity-level precision, recall and F1. A span
        classifier's entities are its decoded spans (with --span-decoding all they may nest; the
        file then shows the non-overlapping ones, earliest first).

--spm-model and --dict override the paths the checkpoint's task recorded.
"""
import argparse
import json
import sys

import torch
from fairseq import checkpoint_utils

from ..criterions.extractive_qa import answer_logits, predict_answers
from ..criterions.token_classification import label_logits, predict_entities
from ..metrics import conll, squad


def load(args):
    overrides = {k: v for k, v in (("spm_model", args.spm_model), ("dict", args.dict)) if v}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.checkpoint], arg_overrides=overrides)
    return models[0].eval(), task


def batches(dataset, batch_size):
    for start in range(0, len(dataset), batch_size):
        yield dataset.collater([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])


@torch.no_grad()
def predict_qa(args):
    model, task = load(args)
    dataset = task.load_file(args.input)
    answered, null_odds = {}, {}
    for sample in batches(dataset, args.batch_size):
        start, end = answer_logits(model, sample)
        for q, p in zip(sample["questions"], predict_answers(sample["questions"], start, end, task.cfg.max_answer_length)):
            answered[q.question.qid], null_odds[q.question.qid] = p.text, p.null_odds
    gold = {q.question.qid: [a[0] for a in q.question.answers] for q in dataset.questions}
    threshold = args.null_threshold if args.null_threshold is not None else task.cfg.null_threshold
    if task.cfg.version_2_with_negative and args.tune_threshold:
        best_f1, threshold = squad.best_threshold(gold, answered, null_odds)
        print(f"no-answer threshold chosen on {args.input}: {threshold:.4f} (F1 {best_f1:.2f})")
    predictions = squad.apply_threshold(answered, null_odds, threshold) if task.cfg.version_2_with_negative else answered
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(predictions, f, indent=1, ensure_ascii=False)
    if args.null_odds_out:
        with open(args.null_odds_out, "w", encoding="utf-8") as f:
            json.dump(null_odds, f, indent=1)
    result = squad.evaluate(gold, predictions)
    print(f"{len(predictions)} predictions -> {args.out}")
    print(f"exact {result['exact']:.2f} | f1 {result['f1']:.2f} | total {result['total']}")


@torch.no_grad()
def predict_tags(args):
    model, task = load(args)
    dataset = task.load_file(args.input)
    gold, predicted = [], []
    with open(args.out, "w", encoding="utf-8") as out:
        for sample in batches(dataset, args.batch_size):
            logits = label_logits(model, sample, task.head_name)
            for e, (tags, entities) in zip(sample["sentences"], predict_entities(task, sample, logits)):
                out.write("".join(f"{w} {g} {p}\n" for w, g, p in zip(e.sentence.words, e.sentence.tags, tags)))
                out.write("\n")
                gold.append(conll.chunks(e.sentence.tags))
                predicted.append(entities)
    result = conll.evaluate_entities(gold, predicted)
    print(f"{len(predicted)} sentences -> {args.out}")
    print(f"precision {result['precision']:.2f} | recall {result['recall']:.2f} | f1 {result['f1']:.2f} | "
          f"chunks {result['chunks']} | predicted {result['predicted']}")


# command: (what it predicts, fairseq task, input format, gold annotation, predictions written)
COMMANDS = {
    "qa": ("extractive QA", "extractive_qa", "SQuAD JSON", "answers", "{question id: answer} JSON"),
    "tags": ("token classification", "token_classification", "CoNLL", "tags", "CoNLL lines 'word gold predicted'"),
}


def get_parser():
    parser = argparse.ArgumentParser(prog="normformer-predict", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (what, task, data, gold, out) in COMMANDS.items():
        p = commands.add_parser(name, help=f"{what} ({data})", description=f"{what} ({data})")
        p.add_argument("checkpoint", help=f"a checkpoint fine-tuned with fairseq-train --task {task}")
        p.add_argument("input", help=f"the {data} file to predict; its gold {gold} are scored")
        p.add_argument("--out", required=True, help=f"where the predictions go ({out}); not written on an error")
        p.add_argument("--spm-model", default="", help="SentencePiece model (default: the checkpoint task's)")
        p.add_argument("--dict", default="", help="the pre-training dict.txt (default: the checkpoint task's)")
        p.add_argument("--batch-size", type=int, default=16, help="questions or sentences per batch (default 16)")
    qa = commands.choices["qa"]
    qa.add_argument("--null-threshold", type=float, default=None,
                    help="v2.0: no answer when its null odds exceed this (default: the checkpoint's --null-threshold)")
    qa.add_argument("--tune-threshold", action="store_true", help="v2.0: choose the threshold maximising F1 on INPUT")
    qa.add_argument("--null-odds-out", default="", help="also write {id: [CLS] score - best span score}")
    return parser


def main(argv=None):
    args = get_parser().parse_args(argv)
    try:
        predict_qa(args) if args.command == "qa" else predict_tags(args)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"normformer-predict: error: {e}")


if __name__ == "__main__":
    main()
