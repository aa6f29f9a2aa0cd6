"""nbprec inside Jupyter: the ``%nbprec`` magics, and the server side of the JupyterLab extension.

- :mod:`nbprec.jupyter.magics`: ``%load_ext nbprec`` registers the ``%nbprec`` line magics, which mirror the
  command line (``%nbprec compare TARGET BENCH`` shows the dashboard), and the ``%%nbprec capture DIR`` cell
  magic, which captures every PyTorch model the cell runs;
- :mod:`nbprec.jupyter.detect`: which entries of a folder are dumps nbprec reads (the rules of
  :func:`nbprec.guess_format`, under a time budget), for the file browser's dump icon;
- :mod:`nbprec.jupyter.notebooks`: the investigation notebooks the JupyterLab extension opens (from the
  templates in ``templates/``);
- :mod:`nbprec.jupyter.server`: the Jupyter server extension (``/nbprec/...`` endpoints) behind the JupyterLab
  extension, whose TypeScript source is ``jupyterlab-nbprec/`` and whose prebuilt assets ship in
  ``nbprec/labextension/``.

Nothing here is imported by ``import nbprec``: IPython, tornado and jupyter_server load only when a notebook
or a Jupyter server asks for them. See ``docs/jupyter.md``.
"""
