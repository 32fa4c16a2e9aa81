//! Images pulled from a real registry and read from real archives, built
//! with umoci and pushed with skopeo: layers verified, whiteouts and opaque
//! directories in overlayfs form, special files kept, one copy per layer,
//! and every bad input named with nothing half-unpacked left. Root: device
//! nodes, ownership and `trusted.` xattrs.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::HashSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use rollpoint_image::{Digest, ImageCache, RegistryOptions, Source};
use rollpoint_testkit::images::{Registry, build_layout, skopeo_copy};
use rollpoint_testkit::require_root;

fn layer_dirs(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cache.join("layers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Where a path is in the stacked view: the top-most layer that has it.
fn find<'a>(lowers: &'a [std::path::PathBuf], rel: &str) -> Option<&'a std::path::PathBuf> {
    lowers
        .iter()
        .find(|l| std::fs::symlink_metadata(l.join(rel)).is_ok())
}

#[test]
fn a_registry_image_unpacks_into_overlay_layers_and_archives_share_them() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let layout = build_layout(work.path());
    let registry = Registry::start();
    let reference = registry.push(&layout, "rollpoint/test:1");

    let cache_dir = work.path().join("cache");
    let cache = ImageCache::open(&cache_dir).unwrap();
    let image = cache
        .pull(
            &Source::Registry(reference.clone()),
            &RegistryOptions::default(),
        )
        .unwrap();
    assert_eq!(image.layers.len(), 3, "{image:?}");
    assert!(
        image.env.contains(&"IMAGE_VAR=from-image".to_owned()),
        "{image:?}"
    );
    assert_eq!(image.working_dir.as_deref(), Some("/app"));
    assert!(image.manifest.is_some());
    let lowers = cache.lowers(&image);
    let [top, middle, bottom] = lowers.as_slice() else {
        panic!("{lowers:?}")
    };

    // Layer 2's whiteout and layer 3's opaque directory, as overlayfs has them.
    let wh = std::fs::symlink_metadata(middle.join("data/gone")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0, "{wh:?}");
    assert_eq!(
        xattr::get(top.join("opq"), "trusted.overlay.opaque")
            .unwrap()
            .as_deref(),
        Some(&b"y"[..])
    );
    assert!(top.join("opq/c").is_file() && !top.join("opq/.wh..wh..opq").exists());
    // Layer 1's special files.
    let h1 = std::fs::metadata(bottom.join("data/hard1")).unwrap();
    let h2 = std::fs::metadata(bottom.join("data/hard2")).unwrap();
    assert_eq!((h1.ino(), h1.nlink()), (h2.ino(), 2));
    assert_eq!(
        std::fs::read_link(bottom.join("data/link")).unwrap(),
        Path::new("keep")
    );
    assert_eq!(
        xattr::get(bottom.join("data/xattr"), "user.rollpoint")
            .unwrap()
            .as_deref(),
        Some(&b"yes"[..])
    );
    let suid = std::fs::metadata(bottom.join("data/suid")).unwrap();
    assert_eq!(suid.permissions().mode() & 0o7777, 0o4755);
    assert_eq!(
        std::fs::metadata(bottom.join("home/app")).unwrap().uid(),
        1000
    );
    assert_eq!(find(&lowers, "data/layer2"), Some(middle));

    // A second pull reads no blob again.
    // A second pull fetches the config only (the image's identity).
    let gets = registry.blob_gets();
    let again = cache
        .pull(
            &Source::Registry(reference.clone()),
            &RegistryOptions::default(),
        )
        .unwrap();
    assert_eq!(again.id, image.id);
    assert_eq!(
        registry.blob_gets(),
        gets + 1,
        "a cached image's layers were fetched again"
    );

    // zstd layers, an OCI archive, a Docker archive and the layout itself:
    // the same tars, so no new layer directory.
    let before = layer_dirs(&cache_dir);
    let zstd_ref = format!("{}/rollpoint/test:zstd", registry.addr);
    skopeo_copy(
        &format!("oci:{}:t", layout.display()),
        &format!("docker://{zstd_ref}"),
        &[
            "--dest-compress-format",
            "zstd",
            "--dest-oci-accept-uncompressed-layers=false",
            "--format",
            "oci",
        ],
    );
    let oci_archive = work.path().join("image.oci.tar");
    let docker_archive = work.path().join("image.docker.tar");
    skopeo_copy(
        &format!("oci:{}:t", layout.display()),
        &format!("oci-archive:{}", oci_archive.display()),
        &[],
    );
    skopeo_copy(
        &format!("oci:{}:t", layout.display()),
        &format!(
            "docker-archive:{}:rollpoint/test:1",
            docker_archive.display()
        ),
        &[],
    );
    for source in [
        Source::Registry(zstd_ref),
        Source::OciArchive(oci_archive),
        Source::DockerArchive(docker_archive),
        Source::OciLayout(layout),
    ] {
        let got = cache
            .pull(&source, &RegistryOptions::default())
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(got.layers, image.layers, "{source}");
    }
    assert_eq!(layer_dirs(&cache_dir), before);

    // Prune keeps what a pin names and what is asked for.
    let record = work.path().join("sandbox.json");
    std::fs::write(&record, format!("{{\"image\":\"{}\"}}", image.id)).unwrap();
    cache.pin(&record, &image.id).unwrap();
    let pruned = cache.prune(&HashSet::new()).unwrap();
    assert!(pruned.layers.is_empty(), "{pruned:?}");
    assert!(cache.get(&image.id).is_ok());
    std::fs::remove_file(&record).unwrap();
    let pruned = cache.prune(&HashSet::new()).unwrap();
    assert_eq!(pruned.layers.len(), 3, "{pruned:?}");
    assert!(layer_dirs(&cache_dir).is_empty());
    assert!(cache.list().unwrap().is_empty());
}

/// Copies a layout and returns the path of its blob `digest`.
fn blob(layout: &Path, digest: &str) -> std::path::PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn manifest_of(layout: &Path) -> serde_json::Value {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap();
    serde_json::from_slice(&std::fs::read(blob(layout, digest)).unwrap()).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn bad_images_fail_naming_the_image_and_layer_and_leave_the_cache_clean() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let layout = build_layout(work.path());
    let registry = Registry::start();
    let opts = RegistryOptions::default();
    let caches = std::cell::Cell::new(0);
    // Each on a cache of its own, which keeps no partial unpack.
    let fail = |source: Source| {
        caches.set(caches.get() + 1);
        let cache_dir = work.path().join(format!("cache{}", caches.get()));
        let cache = ImageCache::open(&cache_dir).unwrap();
        let err = cache.pull(&source, &opts).unwrap_err().to_string();
        for name in layer_dirs(&cache_dir) {
            assert!(
                !name.starts_with(".partial"),
                "{name} left in the cache after: {err}"
            );
        }
        err
    };

    let unknown = fail(Source::Registry(format!("{}/nope/none:1", registry.addr)));
    assert!(
        unknown.contains("nope/none:1") && unknown.contains("no such image or tag"),
        "{unknown}"
    );
    skopeo_copy(
        &format!("oci:{}:t", layout.display()),
        &format!("docker://{}/t/t:1", registry.addr),
        &[],
    );
    let tag = fail(Source::Registry(format!("{}/t/t:missing", registry.addr)));
    assert!(
        tag.contains("t/t:missing") && tag.contains("no such image or tag"),
        "{tag}"
    );
    let bad_ref = fail(Source::Registry("UPPER/Case:x".into()));
    assert!(
        bad_ref.contains("UPPER/Case:x") && bad_ref.contains("not an image reference"),
        "{bad_ref}"
    );

    // A truncated top layer, and a layer whose bytes do not match.
    let manifest = manifest_of(&layout);
    let top = manifest["layers"][2]["digest"].as_str().unwrap().to_owned();
    let truncated = work.path().join("truncated");
    copy_dir(&layout, &truncated);
    let path = blob(&truncated, &top);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = fail(Source::OciLayout(truncated));
    assert!(err.contains(&format!("layer {top}")), "{err}");
    let swapped = work.path().join("swapped");
    copy_dir(&layout, &swapped);
    let bottom = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    std::fs::copy(blob(&swapped, &top), blob(&swapped, &bottom)).unwrap();
    let err = fail(Source::OciLayout(swapped));
    assert!(
        err.contains(&format!("layer {bottom}")) && err.contains("digest mismatch"),
        "{err}"
    );

    // Not an archive, not a layout, a foreign platform, an unknown media type.
    let junk = work.path().join("junk.tar");
    std::fs::write(&junk, b"this is not a tar archive at all").unwrap();
    let err = fail(Source::DockerArchive(junk.clone()));
    assert!(err.contains("junk.tar") && err.contains("not a"), "{err}");
    let err = fail(Source::OciArchive(junk));
    assert!(err.contains("junk.tar") && err.contains("not a"), "{err}");
    let err = fail(Source::OciLayout(work.path().to_owned()));
    assert!(err.contains("not an OCI layout"), "{err}");
    let arm = work.path().join("arm");
    copy_dir(&layout, &arm);
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(arm.join("index.json")).unwrap()).unwrap();
    index["manifests"][0]["platform"] = serde_json::json!({"architecture": "arm64", "os": "linux"});
    std::fs::write(arm.join("index.json"), index.to_string()).unwrap();
    let err = fail(Source::OciLayout(arm.clone()));
    assert!(
        err.contains("no linux/amd64 image") && err.contains("linux/arm64"),
        "{err}"
    );
    let odd = work.path().join("odd");
    copy_dir(&layout, &odd);
    let mut m = manifest.clone();
    m["layers"][1]["mediaType"] = "application/vnd.example.squashfs".into();
    let text = m.to_string();
    let digest = Digest::of(text.as_bytes());
    std::fs::write(odd.join("blobs/sha256").join(digest.hex()), &text).unwrap();
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(odd.join("index.json")).unwrap()).unwrap();
    index["manifests"][0]["digest"] = digest.to_string().into();
    index["manifests"][0]["size"] = text.len().into();
    std::fs::write(odd.join("index.json"), index.to_string()).unwrap();
    let err = fail(Source::OciLayout(odd));
    assert!(
        err.contains("unsupported layer media type") && err.contains("squashfs"),
        "{err}"
    );
}
