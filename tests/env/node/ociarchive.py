#!/usr/bin/env python3
"""ociarchive.py OUT.tar NAME ENTRYPOINT ROOTFS_DIR: a one-layer OCI image archive that
`ctr images import` names NAME (its io.containerd.image.name annotation), holding ROOTFS_DIR
as its only layer (uncompressed, owners root, times zero, so the same input gives the same
digests) and ENTRYPOINT (a JSON list) as its entrypoint.

Used by tests/env/node/ctl for the images a node needs without a registry: the sandbox
(pause) image compiled from the Kubernetes module's build/pause/linux/pause.c, and a small
static busybox image for tests.
"""
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_tar(rootfs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = os.path.join(dirpath, name)
                info = tar.gettarinfo(path, arcname=os.path.relpath(path, rootfs))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    out, name, entrypoint, rootfs = sys.argv[1:]
    layer = layer_tar(rootfs)
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": json.loads(entrypoint), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": len(layer)}],
    }, sort_keys=True).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
        }],
    }, sort_keys=True).encode()

    tmp = out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(arcname, data):
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for digest, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest)):
            add("blobs/sha256/" + digest.split(":", 1)[1], data)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
