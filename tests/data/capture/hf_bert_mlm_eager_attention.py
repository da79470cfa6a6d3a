"""hf_bert_mlm.py's BertForMaskedLM training step with Hugging Face's "eager" attention: the
scores, softmax and weighted values as separate operators (matmul, softmax, dropout, matmul),
as HF models without an SDPA implementation, and BERT before it, compute attention."""

import importlib.util
from pathlib import Path

_where = Path(__file__).with_name("hf_bert_mlm.py")
_loaded = importlib.util.spec_from_file_location("hf_bert_mlm_sdpa", _where)
assert _loaded is not None and _loaded.loader is not None
_base = importlib.util.module_from_spec(_loaded)
_loaded.loader.exec_module(_base)
_base.ATTENTION = "eager"

PRECISIONS = _base.PRECISIONS
MODES = _base.MODES


def build(spec):
    return _base.build(spec)
