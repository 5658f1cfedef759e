package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"deltaship.dev/consumer/v2"
)

// replica is the listener: while writing, each change of the state is a row of objects and
// one of history, in the transaction of the batch (tx), at the record in hand (at). The
// listener's methods return nothing, so the first error is kept in err.
type replica struct {
	consumer.NopListener
	tx      pgx.Tx
	writing bool
	at      position
	err     error
}

// position is a record's place: topic, partition and offset.
type position struct {
	topic     string
	partition int32
	offset    int64
}

func (r *replica) exec(sql string, args ...any) {
	if r.err == nil {
		_, r.err = r.tx.Exec(context.Background(), sql, args...)
	}
}

// identity is an object's uid and resourceVersion: in its metadata, or at its top for a
// reference payload (payload = "reference").
func identity(object json.RawMessage) (uid, resourceVersion string) {
	type fields struct {
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	}
	var top struct {
		fields
		Metadata *fields `json:"metadata"`
	}
	if json.Unmarshal(object, &top) != nil {
		return "", ""
	}
	if top.Metadata != nil {
		return top.Metadata.UID, top.Metadata.ResourceVersion
	}
	return top.UID, top.ResourceVersion
}

func (r *replica) Upsert(resource, key string, object json.RawMessage) {
	if !r.writing {
		return
	}
	uid, rv := identity(object)
	r.exec(`INSERT INTO objects (resource, key, uid, resource_version, object) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (resource, key) DO UPDATE SET uid = excluded.uid, resource_version = excluded.resource_version, object = excluded.object`,
		resource, key, uid, rv, object)
	r.exec(`INSERT INTO history (topic, partition, kafka_offset, resource, key, change, uid, resource_version, object)
		VALUES ($1, $2, $3, $4, $5, 'upsert', $6, $7, $8)`,
		r.at.topic, r.at.partition, r.at.offset, resource, key, uid, rv, object)
}

func (r *replica) Delete(resource, key string) {
	if !r.writing || r.err != nil {
		return
	}
	var uid, rv *string
	err := r.tx.QueryRow(context.Background(), "DELETE FROM objects WHERE resource = $1 AND key = $2 RETURNING uid, resource_version", resource, key).Scan(&uid, &rv)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		r.err = err
		return
	}
	r.exec(`INSERT INTO history (topic, partition, kafka_offset, resource, key, change, uid, resource_version)
		VALUES ($1, $2, $3, $4, $5, 'delete', $6, $7)`,
		r.at.topic, r.at.partition, r.at.offset, resource, key, uid, rv)
}

// check keeps a marker's count and digest, compared with the objects held (Options.OnCheck).
func (r *replica) check(k consumer.Check) {
	if !r.writing {
		return
	}
	r.exec(`INSERT INTO checks (topic, partition, kafka_offset, sync_id, cluster, resource, namespace, expected_count, held_count, expected_digest, held_digest, ok)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		r.at.topic, r.at.partition, r.at.offset, k.SyncID, k.Cluster, k.Resource, k.Namespace,
		int64(k.ExpectedCount), int64(k.HeldCount), k.ExpectedDigest, k.HeldDigest, k.OK())
}
