"""The SQuAD data built from the standard library's source (corpus/finetune_tasks.py)."""
import ast

from fairseq_normformer.corpus.finetune_tasks import squad_paragraphs

SOURCE = '''
class Record:
    @property
    def name(self):
        """Return the name of the record."""

    @name.setter
    def name(self, value):
        """Raise ValueError for an empty name."""
'''


def test_a_property_getter_and_setter_ask_each_question_once():
    """Both are documented and share a name: the ids MODULE:Record.name:VERB would repeat, which
    read_squad refuses."""
    paragraphs = squad_paragraphs("records", ast.parse(SOURCE), unanswerable=True)
    ids = [qa["id"] for p in paragraphs for qa in p["qas"]]
    assert ids == ["records:Record.name:return", "records:Record.name:raise"]
    assert "Raise ValueError for an empty name." in paragraphs[0]["context"]  # the setter's docstring stays
