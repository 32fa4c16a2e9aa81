//! Task images: the first sandbox from a cold image pulled from a loopback
//! registry, against `skopeo copy` + `umoci unpack` of the same image (the
//! baseline, which only gets the files ready), measured in the same run;
//! then create to a first command from the cached image against the host
//! root. Images of 3 layers of incompressible files, at two sizes. Needs
//! root, skopeo, umoci, docker-registry and the static supervisor
//! (`ROLLPOINT_SUPERVISOR`).
//!
//! Run: `cargo bench -p rollpoint-sandbox --bench images`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Base, SandboxSpec};
use rollpoint_testkit::images::{Registry, require, run, skopeo_copy};

const SIZES_MB: [usize; 2] = [24, 192];
const ROUNDS: usize = 3;

/// A 3-layer OCI layout of `mb` MiB of random files.
fn layout(dir: &Path, mb: usize) -> String {
    let umoci = require("umoci");
    let layout = dir.join("layout");
    let image = format!("{}:t", layout.display());
    run(Command::new(&umoci).args(["init", "--layout"]).arg(&layout));
    run(Command::new(&umoci).args(["new", "--image", &image]));
    let bundle = dir.join("bundle");
    run(Command::new(&umoci)
        .args(["unpack", "--image", &image])
        .arg(&bundle));
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for layer in 0..3 {
        let d = bundle.join("rootfs").join(format!("l{layer}"));
        std::fs::create_dir_all(&d).unwrap();
        if layer == 0 {
            std::fs::create_dir_all(bundle.join("rootfs/bin")).unwrap();
            std::fs::copy(require("busybox"), bundle.join("rootfs/bin/busybox")).unwrap();
            std::os::unix::fs::symlink("busybox", bundle.join("rootfs/bin/true")).unwrap();
        }
        for f in 0..mb / 3 {
            let mut out = std::fs::File::create(d.join(format!("f{f}"))).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            for chunk in buf.chunks_mut(8) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                chunk.copy_from_slice(&seed.to_le_bytes());
            }
            out.write_all(&buf).unwrap();
        }
        run(Command::new(&umoci)
            .args(["repack", "--refresh-bundle", "--image", &image])
            .arg(&bundle));
    }
    image
}

fn first_command(b: &LocalBackend, id: &str, spec: &SandboxSpec) -> f64 {
    let t = Instant::now();
    b.create(id, spec).unwrap();
    let out = b
        .exec(id, &rollpoint_testkit::command(&["/bin/true"]))
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    t.elapsed().as_secs_f64() * 1e3
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn row(name: &str, v: &[f64]) -> f64 {
    let (med, min, max) = stats(v.to_vec());
    println!("{name:<44} {med:>10.1} {min:>10.1} {max:>10.1}");
    med
}

fn main() {
    let supervisor = rollpoint_testkit::supervisor_bin();
    let registry = Registry::start();
    let umoci = require("umoci");
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "metric (ms)", "median", "min", "max"
    );
    let mut ratios = Vec::new();
    for mb in SIZES_MB {
        let work = tempfile::tempdir_in("/var/tmp").unwrap();
        let image = layout(work.path(), mb);
        let reference = format!("{}/bench/img{mb}:1", registry.addr);
        skopeo_copy(
            &format!("oci:{image}"),
            &format!("docker://{reference}"),
            &[],
        );
        let spec = SandboxSpec {
            base: Base::Image {
                reference: reference.clone(),
                id: None,
            },
            ..SandboxSpec::default()
        };
        let (mut cold, mut base, mut cached, mut host) = (vec![], vec![], vec![], vec![]);
        for round in 0..ROUNDS {
            let dir = work.path().join(format!("round{round}"));
            let backend =
                LocalBackend::open(&dir.join("owner"), LocalOptions::new(supervisor.clone()))
                    .unwrap();
            cold.push(first_command(&backend, "cold", &spec));
            for i in 0..3 {
                cached.push(first_command(&backend, &format!("warm{i}"), &spec));
                host.push(first_command(
                    &backend,
                    &format!("host{i}"),
                    &SandboxSpec::default(),
                ));
            }
            backend.destroy_all().unwrap();
            drop(backend);
            let t = Instant::now();
            let oci = dir.join("skopeo");
            skopeo_copy(
                &format!("docker://{reference}"),
                &format!("oci:{}:t", oci.display()),
                &[],
            );
            run(Command::new(&umoci)
                .args(["unpack", "--image", &format!("{}:t", oci.display())])
                .arg(dir.join("bundle")));
            base.push(t.elapsed().as_secs_f64() * 1e3);
            std::fs::remove_dir_all(&dir).unwrap();
        }
        let c = row(&format!("{mb} MiB: cold image, first command"), &cold);
        let b = row(
            &format!("{mb} MiB: skopeo copy + umoci unpack (baseline)"),
            &base,
        );
        let w = row(
            &format!("{mb} MiB: cached image, create to first command"),
            &cached,
        );
        let h = row(
            &format!("{mb} MiB: host root, create to first command"),
            &host,
        );
        ratios.push((mb, c / b, w / h));
    }
    println!();
    for (mb, cold, cached) in ratios {
        println!(
            "{mb} MiB: cold / baseline {cold:.2} (target <= 1.0); cached / host root {cached:.2} (target <= 1.5)"
        );
    }
}
