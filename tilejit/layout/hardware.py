"""Hardware layout constructors (re-exported by ``tilejit.layout``).

NVIDIA (mma.sync / wgmma fragments, TMA & wgmma shared-memory swizzles, Blackwell TMEM) live
in :mod:`.hw_nvidia`; Trainium SBUF/PSUM in :mod:`.hw_trainium`. Each constructor documents
the vendor facts it encodes.
"""
from .hw_nvidia import *  # noqa: F401,F403
from .hw_nvidia import __all__ as _nv_all
from .hw_trainium import *  # noqa: F401,F403
from .hw_trainium import __all__ as _trn_all

__all__ = list(_nv_all) + list(_trn_all)
