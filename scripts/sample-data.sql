-- scripts/sample-data.sql: demo tables for scripts/demo.sh (loaded into database postgres).
-- Deterministic: ids and timestamps derive from generate_series, so every run looks the same.

SET client_min_messages = warning;

BEGIN;

DROP TABLE IF EXISTS items, users;

CREATE TABLE items (
    id         serial PRIMARY KEY,
    title      text NOT NULL,
    done       boolean DEFAULT false,
    created_at timestamptz DEFAULT now()
);

INSERT INTO items (title, done, created_at)
SELECT format('Item %s', i),
       i % 3 = 0,
       timestamptz '2024-01-01 00:00:00+00' + i * interval '1 hour'
  FROM generate_series(1, 300) AS i;

CREATE TABLE users (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL UNIQUE,
    profile    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz DEFAULT now()
);

INSERT INTO users (id, name, email, profile, created_at)
SELECT md5('user-' || i)::uuid,
       format('User %s', i),
       format('user%s@example.com', i),
       jsonb_build_object(
           'age', 18 + i % 50,
           'active', i % 4 <> 0,
           'tags', to_jsonb(ARRAY['tag' || i % 5, 'team' || i % 3]),
           'address', jsonb_build_object('city', (ARRAY['Lisbon', 'Berlin', 'Austin', 'Osaka'])[1 + i % 4],
                                         'zip', lpad((i * 37 % 100000)::text, 5, '0'))),
       timestamptz '2024-01-01 00:00:00+00' + i * interval '1 day'
  FROM generate_series(1, 200) AS i;

-- Shapes need the old row of every update and delete: replica identity is the operator's
-- decision (shape_sync.manage_replica_identity is off), so the demo makes it here.
ALTER TABLE items REPLICA IDENTITY FULL;
ALTER TABLE users REPLICA IDENTITY FULL;

COMMIT;

ANALYZE items;
ANALYZE users;
