"""The array helpers under the credit math: factorisation and pair de-duplication."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scpo_lightning._arrays import factorize
from scpo_lightning.shaper import _distinct


def first_appearance_codes(keys):
    """The definition: the k-th distinct key, in order of first appearance, gets code k."""
    seen = {}
    return [seen.setdefault(k, len(seen)) for k in keys], len(seen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=40))
def test_factorize_codes_follow_first_appearance_for_every_input_type(values):
    want_codes, want_n = first_appearance_codes(values)
    arr = np.asarray(values, dtype=np.int64)
    # Integer arrays go through the sorting path; lists, strings, tensors and iterators through the dict.
    for keys in (values, arr, arr.astype(np.int8), torch.tensor(arr), [f"s{v}" for v in values], iter(values)):
        codes, n = factorize(keys, "ids")
        assert codes.dtype == np.int64
        assert codes.tolist() == want_codes and n == want_n


def test_factorize_pairs_from_a_zip_and_strings_exactly():
    # GiGPO's step groups: (group id, anchor) pairs; anchors compare exactly (SPEC §2.5).
    codes, n = factorize(zip([1, 1, 2, 1], ["a", "A", "a", "a"]), "anchors")
    assert codes.tolist() == [0, 1, 2, 0] and n == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=200), st.sampled_from([31, 1 << 23]))
def test_pair_deduplication_equals_np_unique_on_both_paths(keys, space):
    # space 31: the lookup table; 2**23 (> 4M and > 4 × keys): the sort fallback.
    keys = np.asarray(keys, dtype=np.int64)
    distinct, inverse = _distinct(keys, space)
    want_distinct, want_inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(distinct, want_distinct)
    np.testing.assert_array_equal(inverse, want_inverse)
    np.testing.assert_array_equal(distinct[inverse], keys)
