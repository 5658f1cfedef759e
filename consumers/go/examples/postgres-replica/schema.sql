-- The replica's tables, created when missing (docs/consumers/postgres-replica.md, "The schema").
CREATE TABLE IF NOT EXISTS objects (
    resource         text  NOT NULL,
    key              text  NOT NULL,
    uid              text  NOT NULL,
    resource_version text  NOT NULL,
    object           jsonb NOT NULL,
    PRIMARY KEY (resource, key)
);
CREATE TABLE IF NOT EXISTS history (
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    kafka_offset     bigint      NOT NULL,
    resource         text        NOT NULL,
    key              text        NOT NULL,
    change           text        NOT NULL CHECK (change IN ('upsert', 'delete')),
    uid              text,
    resource_version text,
    object           jsonb,
    applied_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, kafka_offset, resource, key)
);
CREATE TABLE IF NOT EXISTS positions (
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS checks (
    topic           text    NOT NULL,
    partition       integer NOT NULL,
    kafka_offset    bigint  NOT NULL,
    sync_id         text    NOT NULL,
    cluster         text    NOT NULL,
    resource        text    NOT NULL,
    namespace       text,
    expected_count  bigint  NOT NULL,
    held_count      bigint  NOT NULL,
    expected_digest text    NOT NULL,
    held_digest     text    NOT NULL,
    ok              boolean NOT NULL,
    PRIMARY KEY (topic, partition, kafka_offset)
);
