"""The toy theory: one attention layer counting up to L, exactly and checkably (SPEC §1).

``model`` (the seven variants on count pairs), ``check`` (the full-domain check), ``constructions``
(explicit parameters per variant), ``budget`` (b_min, l_max, rate fits, L_cap, Table 3), ``figure1``.
"""

from countlens.toy.budget import b_min, fit_rates, l_cap, l_max, table3_constructed  # noqa: F401
from countlens.toy.check import CheckResult, full_domain_check  # noqa: F401
from countlens.toy.constructions import best_construction, construct  # noqa: F401
from countlens.toy.model import VARIANTS, ToyConfig, ToyParams  # noqa: F401
