"""The documentation site's generators (``make docs``): pages made from the code itself, so they follow it.

- :mod:`docsgen.cli_reference`: every ``countlens`` command and option, walked from the CLI's own parser;
- :mod:`docsgen.gallery`: one page per declared experiment (:mod:`countlens.core.registry`), with the
  pictures a report folder holds;
- :mod:`docsgen.notebook`: the tutorials (percent-format scripts, ``# %%`` cells) executed, their outputs and
  figures written into the page;
- :mod:`docsgen.benchmarks`: the current benchmark table from the benches' machine-readable results;
- :mod:`docsgen.hooks`: the MkDocs hooks that put the generated pages into the build (``mkdocs.yml``).

Not part of the installed package (``countlens``): only the docs build and its tests import it.
"""
