"""Symbolic dimensions and facts about them, without the IR: `symbolic.Dim` (polynomials with
floor division, min and max over named dims), `intervals` (bounds), `relaxed` (non-negativity
proofs), `constraints` (user constraints as equalities and bounds), `host_values` (values the
host computes at run time: data-dependent sizes and predicates), `dim_text` (dims as C and
as text)."""
