"""Three LAPACK routines that ``scipy.linalg.lapack`` does not wrap, bound through the function pointers that
``scipy.linalg.cython_lapack`` exports (the same LAPACK scipy itself uses; numba binds LAPACK the same way):

- ``dgebrd``: Golub–Kahan bidiagonalisation ``A = Q B Pᵀ`` of an (m, n) matrix, m >= n, B upper bidiagonal;
- ``dormbr``: apply Q, Qᵀ, P or Pᵀ from ``dgebrd`` to a matrix;
- ``dlasq1``: the singular values of a bidiagonal matrix (dqds, to high relative accuracy).

:func:`available` says whether they could be bound; :mod:`countlens.probes.ridge` falls back to its thin-SVD
solver where they cannot. All arrays are float64 and Fortran-ordered; the wrappers check that and raise
``RuntimeError`` on a nonzero LAPACK ``info``.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

_INT_P = ctypes.POINTER(ctypes.c_int)
_PTR = ctypes.c_void_p
_CHAR_P = ctypes.c_char_p
_SIGNATURES = {
    # m, n, a, lda, d, e, tauq, taup, work, lwork, info
    "dgebrd": (_INT_P, _INT_P, _PTR, _INT_P, _PTR, _PTR, _PTR, _PTR, _PTR, _INT_P, _INT_P),
    # vect, side, trans, m, n, k, a, lda, tau, c, ldc, work, lwork, info
    "dormbr": (_CHAR_P, _CHAR_P, _CHAR_P, _INT_P, _INT_P, _INT_P, _PTR, _INT_P, _PTR, _PTR, _INT_P, _PTR,
               _INT_P, _INT_P),
    # n, d, e, work, info
    "dlasq1": (_INT_P, _PTR, _PTR, _PTR, _INT_P),
}


@cache
def _routines() -> dict | None:
    try:
        import scipy.linalg.cython_lapack as cython_lapack

        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        bound = {}
        for name, argtypes in _SIGNATURES.items():
            capsule = cython_lapack.__pyx_capi__[name]
            # every argument is a pointer: the capsule's C signature must say so (int * / double * / char *)
            signature = get_name(capsule).decode()
            if signature.count("*") != len(argtypes):
                return None
            bound[name] = ctypes.CFUNCTYPE(None, *argtypes)(get_pointer(capsule, get_name(capsule)))
        return bound
    except (ImportError, AttributeError, KeyError, ValueError, OSError):
        return None


def available() -> bool:
    """True when dgebrd, dormbr and dlasq1 could be bound from scipy's LAPACK."""
    return _routines() is not None


def _int(value: int):
    return ctypes.byref(ctypes.c_int(int(value)))


def _ptr(array: np.ndarray):
    return array.ctypes.data_as(ctypes.c_void_p)


def _check_fortran(array: np.ndarray, name: str) -> None:
    if array.dtype != np.float64 or not array.flags.f_contiguous or not array.flags.writeable:
        raise ValueError(f"{name} must be a writeable Fortran-ordered float64 array")


def _call(name: str, make_args) -> None:
    """Workspace query (lwork = -1), then the call with the optimal workspace."""
    routine = _routines()[name]
    info, work = ctypes.c_int(0), np.zeros(1)
    routine(*make_args(work, -1, info))
    if info.value != 0:
        raise RuntimeError(f"LAPACK {name} workspace query failed (info = {info.value})")
    lwork = max(int(work[0]), 1)
    work = np.empty(lwork)
    routine(*make_args(work, lwork, info))
    if info.value != 0:
        raise RuntimeError(f"LAPACK {name} failed (info = {info.value})")


def gebrd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bidiagonalise ``a`` (m, n), m >= n, in place: ``a = Q B Pᵀ`` with B upper bidiagonal.

    Returns the diagonal (n,) and superdiagonal (n - 1,) of B and the Householder scalars ``tauq`` (n,),
    ``taup`` (n,); ``a`` then holds the reflectors that :func:`ormbr` applies.
    """
    _check_fortran(a, "a")
    m, n = a.shape
    if m < n or n < 1:
        raise ValueError(f"gebrd needs m >= n >= 1, got {a.shape}")
    d, e, tauq, taup = np.empty(n), np.empty(max(n - 1, 1)), np.empty(n), np.empty(n)
    _call("dgebrd", lambda work, lwork, info: (
        _int(m), _int(n), _ptr(a), _int(m), _ptr(d), _ptr(e), _ptr(tauq), _ptr(taup), _ptr(work), _int(lwork),
        ctypes.byref(info)))
    return d, e[: n - 1], tauq, taup


def ormbr(vect: str, trans: str, a: np.ndarray, tau: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Multiply ``c`` (n, k) in place from the left by Q (``vect="Q"``) or P (``vect="P"``) of
    :func:`gebrd` on a square (n, n) ``a``, transposed when ``trans="T"``; returns ``c``."""
    _check_fortran(a, "a")
    _check_fortran(c, "c")
    n = a.shape[0]
    if a.shape != (n, n) or c.shape[0] != n or vect not in "QP" or trans not in "NT" or tau.shape != (n,):
        raise ValueError("ormbr needs a square a, c with as many rows, vect 'Q' or 'P', trans 'N' or 'T'")
    tau = np.ascontiguousarray(tau, dtype=np.float64)
    cols = c.shape[1]
    _call("dormbr", lambda work, lwork, info: (
        vect.encode(), b"L", trans.encode(), _int(n), _int(cols), _int(n), _ptr(a), _int(n), _ptr(tau), _ptr(c),
        _int(n), _ptr(work), _int(lwork), ctypes.byref(info)))
    return c


def bidiagonal_singular_values(diag: np.ndarray, sup: np.ndarray) -> np.ndarray:
    """Singular values (n,), in decreasing order, of the bidiagonal matrix with diagonal ``diag`` (n,) and
    off-diagonal ``sup`` (n - 1,)."""
    n = diag.size
    d = np.array(diag, dtype=np.float64)
    e = np.zeros(max(n, 1))
    e[: n - 1] = sup
    work = np.empty(max(4 * n, 1))
    info = ctypes.c_int(0)
    if n:
        _routines()["dlasq1"](_int(n), _ptr(d), _ptr(e), _ptr(work), ctypes.byref(info))
    if info.value != 0:
        raise RuntimeError(f"LAPACK dlasq1 failed (info = {info.value})")
    return d
