"""The sandboxes: ``local`` (a host folder under limits), ``bwrap`` (bubblewrap), ``docker`` (a container)."""
