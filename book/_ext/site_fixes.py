"""A build fix for this book's pinned stack (Jupyter Book 1.0.4, Sphinx 7.4.7).

Sphinx 7.4 lists an inline script that an extension adds after the HTML builder has started
(sphinx-togglebutton's and sphinx-thebe's settings, for example) twice: once as given, with
the file name None, and once more from the registry, with the file name ''. The two copies
differ only in that name, so Sphinx does not see them as the same, and every page declares
`const THEBE_JS_URL` twice, which the browser reports as a SyntaxError. Here the first copy's
name is made '' too, so that Sphinx's own de-duplication drops the second.
"""
from __future__ import annotations


def _merge_inline_scripts(app, env):
    scripts = getattr(app.builder, "_js_files", None)
    if scripts is None:  # not an HTML builder
        return []
    merged = []
    for script in scripts:
        if script.filename is None:
            script = type(script)("", priority=script.priority, **script.attributes)
        if script not in merged:
            merged.append(script)
    scripts[:] = merged
    return []


def setup(app):
    app.connect("env-updated", _merge_inline_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
