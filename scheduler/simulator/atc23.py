"""The ATC'23 study's published fill results, per pod list, to measure the engine against.

Source: the study's artifact, hkust-adsl/kubernetes-scheduler-simulator (Weng et al., "Beware
of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC'23), file ``experiments/analysis/expected_results/analysis_allo_discrete.csv``
(commit 1853fc0). Each of its rows is one policy on one seed (42-51) at tune 1.3; column
``130`` is the GPU allocation ratio (%) once arrived GPU demand is 130 % of capacity. The
figures here are ``100 - that ratio``, the median over its ten seeds, for its FGD policy
(``06-FGD``): what this simulator's fill mode reports as unallocated GPU % at 130 %.
"""

from __future__ import annotations

from collections.abc import Mapping

# Pod list name (``openb_pod_list_NAME.csv``) -> FGD's unallocated GPU % at 130 % arrivals.
FGD_UNALLOCATED_130: Mapping[str, float] = {
    "default": 4.60,
    "multigpu20": 4.35,
    "multigpu30": 3.52,
    "multigpu40": 3.00,
    "multigpu50": 2.83,
    "gpushare40": 5.86,
    "gpushare60": 8.59,
    "gpushare80": 10.69,
    "gpushare100": 13.09,
    "gpuspec10": 5.06,
    "gpuspec20": 5.14,
    "gpuspec25": 5.20,
    "gpuspec33": 5.44,
    "cpu050": 4.80,
    "cpu100": 4.66,
    "cpu200": 4.92,
    "cpu250": 6.59,
}

# The pod lists with a published figure, in the study's order: ``--pods all`` runs these.
STUDY_POD_LISTS: tuple[str, ...] = tuple(FGD_UNALLOCATED_130)
