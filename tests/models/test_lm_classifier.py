"""normformer_lm_classifier: a causal LM checkpoint fine-tuned through sentence_prediction (BERT's
"LTR & No NSP" row): the head reads the last real token, and an LM state dict without <mask> loads."""
import copy

import pytest
import torch
from fairseq.models.roberta.model import RobertaClassificationHead

from fairseq_normformer.models import NormFormerLMClassifier


from .lm_builders import TINY, fake_task, normformer_lm, parse, tiny_dictionary
from tests.conftest import fairseq_config


def test_restores_an_lm_and_classifies_from_the_last_real_token():
    d = tiny_dictionary()
    flags = TINY + ["--share-decoder-input-output-embed"]
    lm = normformer_lm(d, flags=flags).eval()
    d_ft = copy.deepcopy(d)
    d_ft.add_symbol("<mask>")  # as sentence_prediction does
    cfg = fairseq_config(parse("normformer_lm_classifier", flags))
    clf = NormFormerLMClassifier.build_model(cfg.model, fake_task(d_ft))
    clf.register_classification_head("head", num_classes=3)
    head_before = copy.deepcopy(clf.classification_heads["head"].state_dict())
    clf.load_state_dict(lm.state_dict(), strict=True)  # V rows into V + 1; the head is not in the checkpoint
    clf.eval()
    emb = clf.decoder.embed_tokens.weight
    assert emb.size(0) == len(d) + 1 and torch.equal(emb[: len(d)], lm.decoder.embed_tokens.weight)
    for k, v in head_before.items():
        assert torch.equal(clf.classification_heads["head"].state_dict()[k], v)

    tokens = torch.tensor([[d.bos(), 10, 11, 12, d.eos()], [d.bos(), 13, d.eos(), d.pad(), d.pad()]])
    logits, _ = clf(tokens, features_only=True, classification_head_name="head")
    with torch.no_grad():  # reference: the LM's own features at the last non-pad position, RoBERTa's head
        features = [lm(row[row.ne(d.pad())].unsqueeze(0), features_only=True)[0][0, -1] for row in tokens]
        head = RobertaClassificationHead(32, 32, 3, "tanh", 0.0)
        head.load_state_dict(head_before)
        expected = head(torch.stack(features).unsqueeze(1))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
    lm_logits, _ = clf(tokens[:1])  # without a head name it is still the LM
    torch.testing.assert_close(lm_logits[..., : len(d)], lm(tokens[:1])[0], atol=1e-5, rtol=0)


def test_a_dictionary_with_symbols_appended_may_restore_the_checkpoint(tmp_path):
    """sentence_prediction appends <mask> to the LM's dictionary: accepted; any other change (another
    appended symbol included) is refused."""
    import types

    from fairseq_normformer.fixes.checkpoints import check_dictionaries, dictionary_fingerprints

    d = tiny_dictionary()
    checkpoint = tmp_path / "lm.pt"
    torch.save({"extra_state": {"dictionaries": dictionary_fingerprints(types.SimpleNamespace(source_dictionary=d))}},
               checkpoint)  # fmt: skip
    extended, other = copy.deepcopy(d), tiny_dictionary(size=51)
    extended.add_symbol("<mask>")
    other.symbols[10] = "changed"
    check_dictionaries(str(checkpoint), types.SimpleNamespace(source_dictionary=extended))
    with pytest.raises(ValueError, match=rf"\({len(other)} symbols\) does not match the one checkpoint .*lm.pt was trained with"):
        check_dictionaries(str(checkpoint), types.SimpleNamespace(source_dictionary=other))
    appended_word = copy.deepcopy(d)
    appended_word.add_symbol("extra-symbol")
    with pytest.raises(ValueError, match=rf"\({len(appended_word)} symbols\) does not match"):
        check_dictionaries(str(checkpoint), types.SimpleNamespace(source_dictionary=appended_word))
