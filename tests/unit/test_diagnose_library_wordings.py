"""Libraries' own messages, as their sources word them, read into a category by the families' words
(slurmctl.observe.diagnosis_rules): written from the libraries, before the batches that may meet them."""

import pytest

from slurmctl.observe.diagnose import diagnose_text


@pytest.mark.parametrize(("line", "category"), [
    # numpy 1.24 removed its aliases of the builtins; torch < 2.0 has no compile: code written for another version
    ("AttributeError: module 'numpy' has no attribute 'float'", "import_error"),
    ("AttributeError: module 'torch' has no attribute 'compile'", "import_error"),
    # transformers' AutoTokenizer when the class is not in the installed version (or sentencepiece is missing)
    ("ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently imported.", "import_error"),
    # torch.nn.parallel.DistributedDataParallel with find_unused_parameters=False (its default)
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
     "error indicates that your module has parameters that were not used in producing loss. You can enable unused "
     "parameter detection by passing the keyword argument `find_unused_parameters=True` to "
     "`torch.nn.parallel.DistributedDataParallel`", "missing_config"),
    # Keras' losses and metrics
    ("ValueError: logits and labels must have the same shape ((None, 10) vs (None, 1))", "data_shape"),
    # mmcv / mmengine Config.fromfile
    ("FileNotFoundError: Cannot find the config file: configs/faster_rcnn.py", "missing_config"),
])
def test_a_librarys_own_words_name_the_category(line, category):
    assert diagnose_text(line + "\n").category == category


def test_a_submodules_missing_attribute_is_not_a_version_mismatch():
    # torch.cuda's names on a CPU-only build, or a user's own module: the version of the package says nothing
    assert diagnose_text("AttributeError: module 'torch.cuda' has no attribute 'mem_get_info'\n").category == "unknown"
    assert diagnose_text("AttributeError: module 'utils' has no attribute 'load_data'\n").category == "unknown"
