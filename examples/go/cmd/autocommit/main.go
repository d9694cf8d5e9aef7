// Command autocommit is the control that must fail: franz-go's autocommit, and no inbox.
//
// Claim: killed, it credits twice. The client commits offsets by itself, once a second, from a
// goroutine of its own; each credit is applied at once, by two statements that each commit on
// their own. A SIGKILL lands up to a second after the last commit, and every credit applied
// since is delivered and applied again by the next owner. Nothing here remembers an event ID,
// so nothing can notice. Poison is logged and dropped (this is the control, not a model); a lost
// database ends the process (exit 1), as the inbox's does.
//
// Assumptions: the lab's "your consumer" environment (docs/your-consumer.md) and schema.sql's
// tables on the connection's search_path.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"consumers/internal/contract"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

const program = "autocommit-go"

// apply credits the record with no inbox; poison (or what the database refuses) is dropped.
func apply(conn *pgx.Conn, r *kgo.Record) error {
	c, err := contract.CreditOf(r)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = contract.Apply(ctx, conn, c) // two statements, each committed on its own
	}
	var poison contract.Poison
	if err != nil && (errors.As(err, &poison) || contract.Refused(err)) {
		log.Printf("dropped poison %s/%d/%d: %v", r.Topic, r.Partition, r.Offset, err)
		return nil
	}
	return err
}

func run(s contract.Settings, stop context.Context, conn *pgx.Conn) error {
	log.Printf("consuming %s as group %s into schema %s (autocommit, no inbox)", s.Topic, s.Group, s.Schema)
	// A revocation (and the close) commits what was handled, so a clean stop or rebalance loses
	// and repeats nothing here: only a kill, or an eviction, shows the control's flaw.
	commitHandled := func(ctx context.Context, client *kgo.Client) {
		if err := client.CommitMarkedOffsets(ctx); err != nil {
			contract.CommitFailed(err)
		}
	}
	return contract.Consume(s, stop, program, commitHandled, func(client *kgo.Client, r *kgo.Record) error {
		where := fmt.Sprintf("%s/%d/%d not applied", r.Topic, r.Partition, r.Offset)
		if err := contract.Retry(stop, where, contract.Retryable, func() error { return apply(conn, r) }); err != nil {
			return err
		}
		client.MarkCommitRecords(r) // handled: the next autocommit takes it, whenever that comes
		return nil
	},
		// The client commits on its own schedule, from its own goroutine: the flaw under test. Marks
		// (franz-go's default commits one poll behind) make it commit the records handled, as
		// kafka-clients' autocommit commits the positions its poll loop has passed.
		kgo.AutoCommitMarks(),
		// ...once a second (franz-go's default is 5 s): a kill repeats up to a second of credits.
		kgo.AutoCommitInterval(time.Second))
}

func main() { contract.Main(program, run) }
