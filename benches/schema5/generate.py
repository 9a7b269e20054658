# A schema 5 warehouse of N 18-row calls with random v4 uids (what callsync a0d8e46 wrote),
# for measuring the migration to the current schema (BENCHMARKS.md, "Migration from schema 5").
# Usage: python3 benches/schema5/generate.py PATH N   (1,000,000 calls: 5.5 GB, about 7 minutes)
import sqlite3, sys, uuid, random, glob, os
path, n = sys.argv[1], int(sys.argv[2])
if os.path.exists(path): os.remove(path)
conn = sqlite3.connect(path, isolation_level=None)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "migrations")
for d in sorted(glob.glob(root + "/000[1-5]-*")):
    conn.executescript("BEGIN;" + open(d + "/up.sql").read() + ";COMMIT;")
conn.execute("PRAGMA user_version = 5")
conn.execute("PRAGMA journal_mode = OFF"); conn.execute("PRAGMA synchronous = OFF")
conn.execute("PRAGMA cache_size = -6000000")
rnd = random.Random(42)
u = lambda: str(uuid.UUID(int=rnd.getrandbits(128), version=4))
S = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
conn.execute("BEGIN")
calls, params, atts, outs, vars_, notes = [], [], [], [], [], []
def flush():
    conn.executemany("INSERT INTO calls (uid, schedule_uid, external_id, status, progress, is_test_call, cooldown_until, delay, priority, attempts_remaining, retry_intervals, created_at, updated_at, phone_number, phone_e164, full_name, first_name, last_name, phonetic_full_name, phonetic_first_name, phonetic_last_name, email, event_date_time, extra, attempt_count, last_attempt_uid, last_attempt_status, last_attempt_started_at, last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration, outcome_names, answered, transferred, notification_count, content_hash, synced_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", calls)
    conn.executemany("INSERT INTO call_custom_parameters VALUES (?,?,?)", params)
    conn.executemany("INSERT INTO call_attempts (uid, call_uid, position, status, started_at, answered_at, ended_at, duration, created_at, updated_at, error_details, transfer_started_at, transfer_answered_at, transfer_destination, extra) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", atts)
    conn.executemany("INSERT INTO attempt_outcomes VALUES (?,?,?,?,?,?)", outs)
    conn.executemany("INSERT INTO attempt_variables VALUES (?,?,?,?,?,?,?,?)", vars_)
    conn.executemany("INSERT INTO call_notifications VALUES (?,?,?,?,?,?)", notes)
    for l in (calls, params, atts, outs, vars_, notes): l.clear()
for i in range(n):
    c = u(); t = "2026-01-%02d %02d:%02d:%02d" % (1 + i * 7 // n, rnd.randrange(24), rnd.randrange(60), rnd.randrange(60))
    a = [u(), u()]
    calls.append((c, S, "crm-%d" % i, "completed", "completed", 0, None, "null", "null", 0, "[300,900,3600]", t, t, "1555%07d" % i, "+1555%07d" % i, "Ada Lovelace", "Ada", "Lovelace", "", "", "", "ada.lovelace%d@example.com" % i, None, None, 2, a[1], "completed", t, t, t, 120, "no_answer, voicemail, interested, callback_requested", 1, 0, 1, rnd.getrandbits(63), t))
    for k, v in (("plan", "gold"), ("region", "north"), ("segment", "s%d" % rnd.randrange(50)), ("source", "crm")):
        params.append((c, k, v))
    for p in range(2):
        atts.append((a[p], c, p, ["no_answer", "completed"][p], t, t if p else None, t, 120 * p, t, t, None, None, None, None, None))
        for name in (["no_answer", "voicemail"], ["interested", "callback_requested"])[p]:
            outs.append((u(), a[p], c, name, t, None))
        for name in ("preferred_time", "language", "consent"):
            vars_.append((u(), a[p], c, name, "%s-%d" % (name, rnd.randrange(5)), "confirmed", t, None))
    notes.append((u(), c, "delivered", 1, t, None))
    if len(calls) >= 10000:
        flush()
        if i % 100000 == 99999: print(i + 1, flush=True)
flush()
conn.execute("COMMIT")
conn.execute("PRAGMA journal_mode = WAL")
conn.close()
print("done", os.path.getsize(path))
