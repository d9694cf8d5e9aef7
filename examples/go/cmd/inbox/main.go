// Command inbox is an idempotent Kafka consumer: the inbox pattern, in Go, on franz-go and pgx.
//
// Claim: each credit is applied once however often Kafka delivers it. Its event ID goes into
// processed_messages in the same Postgres transaction as the credit, the credit is applied only
// if that insert claimed a new row, and the record's offset is committed, synchronously, only
// after the transaction has. A crash replays at most the records whose offsets were not yet
// committed, and each of those finds its row and is skipped. A poison message is parked on
// <topic>.dlq, acknowledged by the broker, before its offset is committed. A lost database ends
// the process (exit 1) with no offset committed past the record in hand: a supervisor (the lab's
// harness) starts it again, and the inbox row says whether that record's transaction committed.
//
// Assumptions: the lab's "your consumer" environment (docs/your-consumer.md) and schema.sql's
// tables on the connection's search_path; producers put a stable ID in the event_id header.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"consumers/internal/contract"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	program      = "inbox-go"
	consumerName = "wallet-credits-go" // the inbox key's first half: each consumer remembers its own IDs
	txTimeout    = 60 * time.Second    // a statement with no answer this long counts as a lost database
)

// claimAndApply is the inbox: true if the credit was applied now, false if this consumer had it already.
func claimAndApply(conn *pgx.Conn, c contract.Credit) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), txTimeout) // not the signal's: the record finishes
	defer cancel()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit; otherwise the inbox row goes with the credit
	// A concurrent handler of the same ID waits here until the first one ends, then claims nothing.
	tag, err := tx.Exec(ctx, "INSERT INTO processed_messages (consumer, message_id) VALUES ($1, $2) "+
		"ON CONFLICT DO NOTHING", consumerName, c.EventID)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err // already done (nothing written): skip it, but still commit the offset
	}
	if err = contract.Apply(ctx, tx, c); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// handle takes one record to a durable outcome: applied, skipped, or parked on the DLQ.
func handle(conn *pgx.Conn, dlq *kgo.Client, r *kgo.Record) error {
	c, err := contract.CreditOf(r)
	if err == nil {
		var applied bool
		if applied, err = claimAndApply(conn, c); err == nil && !applied {
			log.Printf("skipped duplicate %s", c.EventID)
		}
	}
	var poison contract.Poison
	if err != nil && !errors.As(err, &poison) && contract.Refused(err) {
		poison = contract.Poison("the database refused it: " + err.Error())
	}
	if poison != "" { // no retry can fix it: park it
		return deadLetter(dlq, r, string(poison))
	}
	return err
}

// deadLetter parks the record on <topic>.dlq with its key, value and headers plus dlq_reason and
// dlq_source, and returns once the broker has acknowledged it; one too large to park whole is
// parked as a reference (its size and SHA-256).
func deadLetter(dlq *kgo.Client, r *kgo.Record, reason string) error {
	where := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	tags := []kgo.RecordHeader{{Key: "dlq_reason", Value: []byte(reason)}, {Key: "dlq_source", Value: []byte(where)}}
	letter := &kgo.Record{Topic: r.Topic + ".dlq", Key: r.Key, Value: r.Value,
		Headers: append(append([]kgo.RecordHeader{}, r.Headers...), tags...)}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second) // past the delivery timeout
	defer cancel()
	err := dlq.ProduceSync(ctx, letter).FirstErr()
	if errors.Is(err, kerr.MessageTooLarge) {
		sum := sha256.Sum256(r.Value)
		ref, _ := json.Marshal(map[string]any{"parked_as": "reference", "bytes": len(r.Value),
			"sha256": hex.EncodeToString(sum[:]), "headers": len(r.Headers)})
		err = dlq.ProduceSync(ctx, &kgo.Record{Topic: letter.Topic, Value: ref, Headers: tags}).FirstErr()
	}
	if err != nil {
		return fmt.Errorf("%w: dead-letter topic refused %s: %w", contract.ErrUnavailable, where, err)
	}
	log.Printf("dead-lettered %s: %s", where, reason)
	return nil
}

// ensureTopic creates <topic>.dlq unless it exists (the lab's broker does not auto-create),
// waiting while the broker cannot be reached. Replication factor: the broker's default.
func ensureTopic(stop context.Context, dlq *kgo.Client, topic string) error {
	always := func(error) bool { return true }
	return contract.Retry(stop, "cannot create dead-letter topic "+topic, always, func() error {
		req, t := kmsg.NewPtrCreateTopicsRequest(), kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 1, -1
		req.Topics, req.TimeoutMillis = append(req.Topics, t), 30000
		resp, err := req.RequestWith(stop, dlq)
		if err == nil {
			if err = kerr.ErrorForCode(resp.Topics[0].ErrorCode); errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
		}
		return err
	})
}

// commitOffset commits the offset after the record, synchronously. A failure is logged, not
// returned: a rebalance or an eviction took the partition, and its next owner finds the inbox row.
func commitOffset(client *kgo.Client, r *kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.CommitRecords(ctx, r); err != nil {
		contract.CommitFailed(err)
	}
}

func run(s contract.Settings, stop context.Context, conn *pgx.Conn) error {
	dlq, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ClientID("dead-letters-go"),
		// Acknowledged by every in-sync replica: "parked" must survive a broker's loss.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// How long one letter may take, retries included (idempotent, franz-go's default, so a retry
		// cannot write a letter twice); past it the record is retried, its offset not committed.
		kgo.RecordDeliveryTimeout(30*time.Second), kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer dlq.Close()
	if err = ensureTopic(stop, dlq, s.Topic+".dlq"); err != nil {
		return err
	}
	log.Printf("consuming %s as group %s into schema %s", s.Topic, s.Group, s.Schema)
	err = contract.Consume(s, stop, program, nil, func(client *kgo.Client, r *kgo.Record) error {
		where := fmt.Sprintf("%s/%d/%d not handled", r.Topic, r.Partition, r.Offset)
		if err := contract.Retry(stop, where, contract.Retryable, func() error { return handle(conn, dlq, r) }); err != nil {
			return err // stopped, or the database is lost: the offset stays where it is
		}
		commitOffset(client, r) // last, after the database's commit (or the DLQ's ack)
		return nil
	},
		// We commit, and only after Postgres has: an offset never gets ahead of a durable outcome.
		kgo.DisableAutoCommit())
	if err != nil {
		return fmt.Errorf("stopping, nothing committed past the record in hand: %w", err)
	}
	return nil
}

func main() { contract.Main(program, run) }
