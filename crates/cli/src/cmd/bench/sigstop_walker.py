# Baseline: the reference design's pause, in Python 3. Walk the tree from
# /proc, SIGSTOP each member, rescan until no new member appears, then poll
# states until every member is T (or gone). Continue: SIGCONT each, poll
# until none is T. Prints one JSON line [pause_seconds, continue_seconds]
# per repetition; the interpreter's start-up is not timed.
import json, os, signal, sys, time


def scan():
    ppid, state = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(b")") + 2 :].split()
        pid = int(d)
        state[pid] = fields[0].decode()
        ppid[pid] = int(fields[1])
    return ppid, state


def tree(root):
    ppid, _ = scan()
    kids = {}
    for p, pp in ppid.items():
        kids.setdefault(pp, []).append(p)
    out, i = [root], 0
    while i < len(out):
        out.extend(kids.get(out[i], []))
        i += 1
    return out


def pause(root):
    t0 = time.perf_counter()
    seen = set()
    while True:
        members = tree(root)
        new = [p for p in members if p not in seen]
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            seen.add(p)
        if new:
            continue
        _, state = scan()
        if all(state.get(p, "X") in "TtZX" for p in members):
            return time.perf_counter() - t0, seen
        time.sleep(0.001)


def resume(pids):
    t0 = time.perf_counter()
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass
    while True:
        _, state = scan()
        if not any(state.get(p) in ("T", "t") for p in pids):
            return time.perf_counter() - t0
        time.sleep(0.001)


root, reps = int(sys.argv[1]), int(sys.argv[2])
for _ in range(reps):
    p, pids = pause(root)
    c = resume(pids)
    print(json.dumps([p, c]), flush=True)
