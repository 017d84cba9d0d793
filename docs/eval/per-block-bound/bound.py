#!/usr/bin/env python3
"""EXPERIMENT, not part of cargo-ekstazi: which of a replay's selected tests a
per-block comparison could at best spare, from run.sh's line coverage.

  bound.py <replay dir> <out.csv> <run.sh out dir>...

A selected test counts as spared when every reason is a changed or removed
function, each of them has an edited line, and the test ran no changed line.
Prints per commit and the window's mean with the measured commits' bounds."""
import csv, json, glob, os, sys, collections
replay, csv_out, blks = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = list(csv.DictReader(open(os.path.join(replay, 'replay-function.csv'))))
reports = {os.path.basename(p).split('-')[1]: p for p in glob.glob(os.path.join(replay, 'reports', '*-function.json'))}
FN = ('function changed: ', 'function removed: ')
out = []
new_shares = []
for r in rows:
    c = r['commit']
    share = float(r['share'])
    found = [b for b in blks if os.path.exists(os.path.join(b, 'reports', c + '.json'))]
    blk = found[0] if found else blks[0]
    tfile = os.path.join(blk, 'touched', c + '.jsonl')
    if not os.path.exists(tfile) or not any('"test"' in l for l in open(tfile)):
        new_shares.append(share)
        continue
    touched, edited = {}, set()
    for line in open(tfile):
        d = json.loads(line)
        if 'edited' in d:
            edited.add(d['edited'])
        else:
            stem = d['exe'].rsplit('-', 1)[0]
            key = (stem, d['test'])
            touched[key] = touched.get(key, False) or d['touched']
    own = os.path.join(blk, 'reports', c + '.json')
    if not os.path.exists(own):
        new_shares.append(share)
        continue
    rep = json.load(open(own))
    # The bound is taken from the replay's own selection (the published
    # figure): its tests less those the experiment counts as spared.
    replay = json.load(open(reports[c]))
    replay_sel = {(t['binary'], t['name']) for t in replay['tests'] if t['selected'] and not t['ignored'] and t['name'] != '(doctests)'}
    replay_selected = int(r['selected'])
    assert replay_selected == len(replay_sel), c
    tests = [t for t in rep['tests'] if not t['ignored'] and t['name'] != '(doctests)']
    sel = [t for t in tests if t['selected']]
    kinds = collections.Counter()
    spared_ids = set()
    spared_by_fn = collections.Counter()
    unedited_fns = collections.Counter()
    for t in sel:
        stem = t['binary'].split('::')[-1].split('/')[-1].replace('-', '_')
        key = (stem, t['name'])
        if not all(x.startswith(FN) for x in t['reasons']):
            kinds['other reason'] += 1
            continue
        if key not in touched:
            kinds['no coverage at parent'] += 1
            continue
        # A program's function is named with " (in <program>)".
        names = [x.split(': ', 1)[1].split(' (in ', 1)[0] for x in t['reasons']]
        missing = [n for n in names if n not in edited]
        if touched[key]:
            kinds['ran a changed line'] += 1
        elif missing:
            kinds['function changed without an edited line'] += 1
            for n in missing: unedited_fns[n] += 1
        else:
            kinds['spared'] += 1
            spared_ids.add((t['binary'], t['name']))
            for n in names: spared_by_fn[n] += 1
    n = int(r['tests'])
    new = len(replay_sel) - len(replay_sel & spared_ids)
    new_shares.append(100.0 * new / n)
    out.append((c, r['subject'][:50], n, len(sel), new, dict(kinds), spared_by_fn.most_common(3), unedited_fns.most_common(3), replay_selected))
for o in out:
    print(f"{o[0]} {o[1]!r}: tests {o[2]}, experiment selected {o[3]}, replay selected {o[8]} ({100*o[8]/o[2]:.1f}%) -> bound {o[4]} ({100*o[4]/o[2]:.1f}%) {o[5]}")
    print(f"    spared for: {o[6]}")
    print(f"    not edited: {o[7]}")
with open(csv_out, 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['commit', 'subject', 'tests', 'replay_selected', 'experiment_selected', 'bound_selected',
                'spared', 'ran_a_changed_line', 'function_changed_without_an_edited_line', 'other_reason', 'no_coverage_at_parent', 'spared_for'])
    for o in out:
        k = o[5]
        w.writerow([o[0], o[1], o[2], o[8], o[3], o[4], k.get('spared', 0), k.get('ran a changed line', 0),
                    k.get('function changed without an edited line', 0), k.get('other reason', 0), k.get('no coverage at parent', 0),
                    '; '.join(f"{n} ({c})" for n, c in o[6])])
old = [float(r['share']) for r in rows]
print(f"commits {len(rows)}, measured {len(out)}; mean {sum(old)/len(old):.2f}% -> {sum(new_shares)/len(new_shares):.2f}%")
print(f"measured commits' points: {sum(100*o[8]/o[2] for o in out)/len(rows):.2f} -> {sum(100*o[4]/o[2] for o in out)/len(rows):.2f}")
