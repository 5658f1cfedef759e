//! deltaship's OCI image, built without a container engine by `deploy/image/build` (umoci),
//! checked as a runtime sees it: the layout's digests and sizes, the image config (user
//! 65532, entrypoint, command, port, labels naming the binary's version and commit), the
//! root file system's owners and modes, and its binary run as 65532 on a read-only root
//! (a mount namespace, chroot): `--version`, `check` against the test API server, and the
//! image's own command until its first sync, with /healthz answering.
//!
//! The image packs this test build's binary (`--binary`); `deploy/image/build` without it
//! packs a release build, the same way. Needs root (as the build does): the image's files
//! are owned by root and 65532.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

const TAG: &str = "test";
const USER: &str = "65532:65532";

struct Image {
    layout: PathBuf,
    config: Value,
    root: PathBuf,
}

/// The blob of `digest` (`sha256:<hex>`), checked against its digest and size.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap_or_else(|| panic!("{digest} is not a sha256 digest"));
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(&bytes)), hex, "blob {digest} does not match its digest");
    assert_eq!(bytes.len() as u64, descriptor["size"].as_u64().unwrap(), "blob {digest} is not of its size");
    bytes
}

/// Built once per run of this file, into the target directory (replaced each run).
fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let layout = support::image::build("image/layout", TAG);
        let dir = layout.parent().unwrap().to_path_buf();

        let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let oci_layout: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
        assert_eq!(oci_layout["imageLayoutVersion"], "1.0.0");
        let descriptor = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == TAG)
            .unwrap_or_else(|| panic!("no manifest tagged {TAG} in {index}"));
        assert_eq!(descriptor["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        let manifest: Value = serde_json::from_slice(&blob(&layout, descriptor)).unwrap();
        assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
        let config: Value = serde_json::from_slice(&blob(&layout, &manifest["config"])).unwrap();

        // Unpack the layers in order, as a runtime does (one layer here, so no whiteouts).
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), config["rootfs"]["diff_ids"].as_array().unwrap().len());
        let root = dir.join("rootfs");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        for layer in layers {
            assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
            let file = dir.join("layer.tar.gz");
            std::fs::write(&file, blob(&layout, layer)).unwrap();
            let untar = Command::new("tar").args(["--numeric-owner", "-xzpf"]).arg(&file).arg("-C").arg(&root).output().unwrap();
            assert!(untar.status.success(), "{}", String::from_utf8_lossy(&untar.stderr));
            std::fs::remove_file(&file).unwrap();
        }
        Image { layout, config, root }
    })
}

/// The image's entrypoint and then `args`, as `user`, on the image's root mounted read-only
/// with `conf` mounted read-only at /etc/deltaship, /proc and /dev as a runtime gives them.
fn in_image(user: &str, conf: &Path, args: &[&str]) -> Command {
    let image = image();
    let entrypoint: Vec<&str> = image.config["config"]["Entrypoint"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let script = r#"set -e
root=$1; conf=$2; user=$3; shift 3
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$conf" "$root/etc/deltaship"
mount -o remount,bind,ro "$root/etc/deltaship"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
# Only the image's environment: what the runtime sets from its config, and HOME.
exec env -i PATH=/usr/local/bin HOME=/home/nonroot "$(command -v chroot)" --userspec="$user" "$root" "$@""#;
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"]).arg(&image.root).arg(conf).arg(user).args(&entrypoint).args(args);
    cmd
}

/// A directory to mount at /etc/deltaship: `deltaship.yaml` (stdout sink, ConfigMaps of
/// kube-system) and the test API server's kubeconfig, readable by 65532 only.
fn conf_dir(listen: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(support::unique("image-conf"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(support::env().kubeconfig, dir.join("kubeconfig")).unwrap();
    std::fs::write(
        dir.join("deltaship.yaml"),
        format!(
            "cluster: image-test\nkubernetes: {{kubeconfig: /etc/deltaship/kubeconfig}}\n\
             resources: [{{version: v1, kind: ConfigMap, namespaces: [kube-system]}}]\n\
             sink: {{type: stdout}}\nhttp: {{listen: '{listen}'}}\nlog: {{format: json}}\n"
        ),
    )
    .unwrap();
    for f in ["kubeconfig", "deltaship.yaml"] {
        set_owner_and_mode(&dir.join(f), "65532:65532", "0400");
    }
    set_owner_and_mode(&dir, "65532:65532", "0500");
    dir
}

fn set_owner_and_mode(path: &Path, owner: &str, mode: &str) {
    assert!(Command::new("chown").arg(owner).arg(path).status().unwrap().success());
    assert!(Command::new("chmod").arg(mode).arg(path).status().unwrap().success());
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_layout_and_config_are_what_a_runtime_needs() {
    let image = image();
    let c = &image.config;
    assert_eq!((c["os"].as_str(), c["architecture"].as_str()), (Some("linux"), Some("amd64")));
    let config = &c["config"];
    assert_eq!(config["User"], USER);
    assert_eq!(config["Entrypoint"], serde_json::json!(["/usr/local/bin/deltaship"]));
    assert_eq!(config["Cmd"], serde_json::json!(["run", "--config", "/etc/deltaship/deltaship.yaml"]));
    assert!(config["ExposedPorts"]["9090/tcp"].is_object(), "{config}");
    // The labels name what the packed binary says of itself.
    let version = Command::new(env!("CARGO_BIN_EXE_deltaship")).arg("--version").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let labels = &config["Labels"];
    assert_eq!(
        format!(
            "deltaship {} ({})\n",
            labels["org.opencontainers.image.version"].as_str().unwrap(),
            labels["org.opencontainers.image.revision"].as_str().unwrap()
        ),
        version
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.title"], "deltaship");
    assert!(image.layout.join("index.json").is_file());
}

#[test]
fn the_root_file_system_has_no_shell_and_the_owners_a_nonroot_user_needs() {
    let root = &image().root;
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("nonroot:x:65532:65532:")), "{passwd}");
    for absent in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/apt"] {
        assert!(!root.join(absent).exists(), "{absent} is in the image");
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let home = std::fs::metadata(root.join("home/nonroot")).unwrap();
    assert_eq!((home.uid(), home.gid(), home.permissions().mode() & 0o7777), (65532, 65532, 0o700));
    let tmp = std::fs::metadata(root.join("tmp")).unwrap();
    assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777);
    let bin = std::fs::metadata(root.join("usr/local/bin/deltaship")).unwrap();
    assert_eq!((bin.uid(), bin.permissions().mode() & 0o7777), (0, 0o755));
    for f in ["etc/ssl/certs/ca-certificates.crt", "usr/share/doc/deltaship/LICENSE", "usr/share/doc/libc6/copyright"] {
        assert!(root.join(f).is_file(), "{f} is not in the image");
    }
}

#[test]
fn the_binary_runs_version_and_check_as_nonroot_on_a_read_only_root() {
    let conf = conf_dir("127.0.0.1:9090");
    let out = in_image(USER, &conf, &["--version"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(concat!("deltaship ", env!("CARGO_PKG_VERSION"), " (")), "{}", text(&out));

    let out = in_image(USER, &conf, &["check", "--config", "/etc/deltaship/deltaship.yaml"]).output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "check in the image failed:\n{said}");
    assert!(said.contains("[ok]") && !said.contains("[FAIL]"), "{said}");

    // Another user cannot read the configuration: the user really is 65532, not root.
    let out = in_image("65533:65533", &conf, &["check", "--config", "/etc/deltaship/deltaship.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(support::bridge::EXIT_CONFIG), "as 65533:\n{}", text(&out));
    std::fs::remove_dir_all(&conf).unwrap();
}

/// The image's own command (`run --config /etc/deltaship/deltaship.yaml`) writes nothing to
/// its root: it syncs, answers /healthz, and stops on SIGTERM with 0.
#[test]
fn the_images_command_syncs_on_a_read_only_root() {
    let listen = format!("127.0.0.1:{}", support::bridge::free_port());
    let conf = conf_dir(&listen);
    let cmd: Vec<&str> = image().config["config"]["Cmd"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let mut child = in_image(USER, &conf, &cmd).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if line.contains("\"dev.deltaship.sync.completed\"") && tx.send(line).is_err() {
                return;
            }
        }
    });
    let synced = rx.recv_timeout(Duration::from_secs(120));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut health = None;
    while synced.is_ok() && Instant::now() < deadline {
        health = support::bridge::http_get(&listen, "/healthz");
        if health.as_ref().is_some_and(|(code, _)| *code == 200) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // unshare, sh and chroot exec one another: the child is deltaship itself.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(synced.is_ok(), "no sync.completed from the image's command within 120 s:\n{stderr}");
    assert_eq!(health.map(|(code, _)| code), Some(200), "/healthz:\n{stderr}");
    assert!(status.success(), "exit {status:?} after SIGTERM:\n{stderr}");
    assert!(!stderr.contains("Read-only file system"), "{stderr}");
    std::fs::remove_dir_all(&conf).unwrap();
}
