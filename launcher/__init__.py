"""The `astrai` command and `astrai serve`'s supervisor: the layer above gateway, worker, bench."""
