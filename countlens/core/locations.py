"""Residual-stream locations: their names, the one resolver, and the one human label rule.

Location 0 is ``embed`` (the embedding output, the input to block 0); location ``l + 1`` is
``blocks.{l}.hook_resid_post`` (the raw output of block ``l``, 0-based as in TransformerLens). Humans
read "after block ℓ" with ℓ = l + 1 (1-based), so the location index and ℓ agree: location 16 is
"after block 16" = ``blocks.15.hook_resid_post``. Toy representations use their own names (``h``, ...).
"""

from __future__ import annotations

import re

from countlens.core.errors import UsageError

EMBED = "embed"
_BLOCK = re.compile(r"^blocks\.(\d+)\.(hook_[a-z_]+)$")


def location_names(n_blocks: int) -> list[str]:
    """``["embed", "blocks.0.hook_resid_post", ..., f"blocks.{n_blocks-1}.hook_resid_post"]``."""
    return [EMBED] + [f"blocks.{i}.hook_resid_post" for i in range(n_blocks)]


def location_label(name: str) -> str:
    """The human label of a location name: ``embed`` -> ``embeddings``,
    ``blocks.l.hook_resid_post`` -> ``after block l+1``; other hook points say which block and hook;
    toy names are kept as they are."""
    if name == EMBED:
        return "embeddings"
    match = _BLOCK.match(name)
    if not match:
        return name
    block, hook = int(match.group(1)), match.group(2)
    if hook == "hook_resid_post":
        return f"after block {block + 1}"
    return f"block {block + 1} {hook.removeprefix('hook_')}"


def resolve_locations(names: list[str], spec: str | int | None) -> list[int]:
    """Location indices from a spec: a name (``blocks.0.hook_resid_post``), an index (``3``, ``-1``), an
    inclusive range (``0:5``, ``2:-1``) with an optional step (``0:-1:4``: every 4th from 0, so a spec that
    fits any depth), a comma list of those (repeats dropped, first order kept), or ``all`` / ``None`` for
    every location.

    Raises :class:`UsageError` naming the available locations for one that does not exist.
    """
    if spec is None or str(spec).strip() in ("", "all"):
        return list(range(len(names)))
    out: list[int] = []
    for item in (s.strip() for s in str(spec).split(",") if s.strip()):
        out.extend(_resolve_item(names, item))
    return list(dict.fromkeys(out))


def resolve_location(names: list[str], spec: str | int) -> int:
    """Exactly one location index (see :func:`resolve_locations`)."""
    found = resolve_locations(names, spec)
    if len(found) != 1:
        raise UsageError(f"location {spec!r} names {len(found)} locations; name exactly one")
    return found[0]


def _resolve_item(names: list[str], item: str) -> list[int]:
    if item in names:
        return [names.index(item)]
    parts = item.split(":")
    try:
        bounds = [int(p) for p in parts]
    except ValueError:
        bounds = []
    if len(bounds) == 1 and -len(names) <= bounds[0] < len(names):
        return [bounds[0] % len(names)]
    if len(bounds) in (2, 3) and all(-len(names) <= b < len(names) for b in bounds[:2]):
        start, stop = (b % len(names) for b in bounds[:2])
        step = bounds[2] if len(bounds) == 3 else 1
        if start <= stop and step >= 1:
            return list(range(start, stop + 1, step))
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    what = str(bounds[0]) if len(bounds) == 1 else repr(item)  # an index is named as the number it is
    raise UsageError(f"location {what} does not exist; choose names or indices 0..{len(names) - 1} "
                     f"({shown})")


def first_block_location(names: list[str]) -> int:
    """The output of the first block (``blocks.0.hook_resid_post``), ``h`` for toy representations,
    else location 1 (location 0 being the embedding)."""
    for name in ("blocks.0.hook_resid_post", "h"):
        if name in names:
            return names.index(name)
    return min(1, len(names) - 1)


def default_pca_locations(n_locations: int) -> list[int]:
    """Figure 6's four locations: embeddings, after block 1, the middle block, the last block."""
    picks = [0, 1, n_locations // 2, n_locations - 1]
    out: list[int] = []
    for p in picks:
        p = min(max(p, 0), n_locations - 1)
        if p not in out:
            out.append(p)
    return out


__all__ = ["EMBED", "location_names", "location_label", "resolve_locations", "resolve_location",
           "first_block_location", "default_pca_locations"]
