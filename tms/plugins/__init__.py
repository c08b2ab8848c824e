"""What the core does with plugins, below their public surface (`tms.extension`): the loader
(`loading`: the `TMS_PLUGINS` named in the `tms.plugins` entry point group, and the one
`Extensions` the app and `tms stdio` wire in), each seam's runner (`policies`, `hooks`), the
plugins' tools, prompts and routes as the core serves them (`registry`, `served`, `routes`), the
strfry adapter (`strfry`), and the one place that says the core's values in the surface's
vocabulary (`vocabulary`).

A plugin never imports anything here; everything here may change in any release. The surface
imports nothing of this package, nor of the core: the arrow runs from here to it.
"""
