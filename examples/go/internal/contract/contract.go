// Package contract is what both Go consumers share around their loops: the lab's "your consumer"
// environment (docs/your-consumer.md), the client options that decide delivery, a credit as a
// message carries it, the database's verdict on an error, and the lifecycle (--version, SIGTERM,
// and the max.poll.interval.ms that franz-go does not have).
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	Release         = "1.0.0"
	MaxPollRecords  = 100 // a small batch: every record's transaction and commit must fit in the poll interval
	maxEventIDBytes = 512 // far above any UUID; a B-tree entry (the inbox's primary key) has a hard size limit
	maxAmount       = 1 << 53
)

// Settings is the environment the harness gives a command; zero durations leave the client's default.
type Settings struct {
	Brokers                                            []string
	Topic, Group, Schema, GroupProtocol                string
	SessionTimeout, HeartbeatInterval, MaxPollInterval time.Duration
}

// Main reads the lab's environment, connects to the database and runs a program's loop until a
// signal (`stop`) or an error ends it; then exits 0 when a signal did, 1 when an error did (a
// lost database: the supervisor starts it again, and no offset moved past the record in hand).
func Main(program string, run func(s Settings, stop context.Context, conn *pgx.Conn) error) {
	s, stop, status := Start(program), Stopping(), 0
	conn, err := Connect(stop, program)
	if err == nil {
		err = run(s, stop, conn) // everything it opened is closed when it returns
		conn.Close(context.Background())
	}
	if err != nil && !errors.Is(err, ErrStopped) {
		log.Printf("stopping: %v", err)
		status = 1
	}
	log.Printf("stopped, exit status %d", status)
	os.Exit(status)
}

// Start handles the arguments (--version, nothing else), sets up the log and reads the
// environment; a bad one is one line on stderr and exit status 2, as the Java pair does.
func Start(program string) Settings {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		info, _ := debug.ReadBuildInfo() // the version go.mod pinned, as built
		i := slices.IndexFunc(info.Deps, func(m *debug.Module) bool { return m.Path == "github.com/twmb/franz-go" })
		fmt.Printf("%s %s (franz-go %s)%s\n", program, Release, info.Deps[i].Version, builtFrom(info))
		os.Exit(0)
	}
	log.SetOutput(os.Stdout) // the lab reads stdout
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	s, err := settings()
	if err == nil && len(os.Args) > 1 {
		err = errors.New("takes no arguments but --version; the environment configures it (KAFKA_BROKERS, " +
			"KAFKA_TOPIC, KAFKA_GROUP, CONSUMER_DSN or PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGOPTIONS)")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(2)
	}
	return s
}

// builtFrom names the commit the binary was built from, which go build stamps inside a git
// checkout: a results file records this line (--version-command), and the lab hashes only the
// Python and SQL a run loads, so this is what says which code of this program was measured.
func builtFrom(info *debug.BuildInfo) string {
	stamped := map[string]string{}
	for _, setting := range info.Settings {
		stamped[setting.Key] = setting.Value
	}
	revision := stamped["vcs.revision"]
	if revision == "" {
		return ""
	}
	if stamped["vcs.modified"] == "true" {
		return " built from " + revision[:min(12, len(revision))] + " with local changes"
	}
	return " built from " + revision[:min(12, len(revision))]
}

func settings() (s Settings, err error) {
	need := func(name string) string {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" && err == nil {
			err = fmt.Errorf("%s is not set", name)
		}
		return v
	}
	ms := func(name string) time.Duration {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			return 0
		}
		n, bad := strconv.Atoi(v)
		if (bad != nil || n < 1) && err == nil {
			err = fmt.Errorf("%s must be a positive integer, not %q", name, v)
		}
		return time.Duration(n) * time.Millisecond
	}
	s.Brokers = strings.Split(need("KAFKA_BROKERS"), ",")
	s.Topic, s.Group, s.Schema = need("KAFKA_TOPIC"), need("KAFKA_GROUP"), os.Getenv("CONSUMER_SCHEMA")
	s.SessionTimeout, s.HeartbeatInterval = ms("KAFKA_SESSION_TIMEOUT_MS"), ms("KAFKA_HEARTBEAT_INTERVAL_MS")
	if s.MaxPollInterval = ms("KAFKA_MAX_POLL_INTERVAL_MS"); s.MaxPollInterval == 0 {
		s.MaxPollInterval = 300 * time.Second // kafka-clients' and librdkafka's default
	}
	s.GroupProtocol = strings.ToLower(strings.TrimSpace(os.Getenv("KAFKA_GROUP_PROTOCOL")))
	if s.GroupProtocol != "" && s.GroupProtocol != "classic" && s.GroupProtocol != "consumer" && err == nil {
		err = fmt.Errorf("KAFKA_GROUP_PROTOCOL must be classic or consumer, not %q", s.GroupProtocol)
	}
	return s, err
}

// options: where to read, as whom, the group timeouts; each program adds its commit policy.
func options(s Settings, clientID string, onRevoke func(context.Context, *kgo.Client)) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.Brokers...), kgo.ClientID(clientID), kgo.ConsumerGroup(s.Group), kgo.ConsumeTopics(s.Topic),
		// A new group starts at the beginning; "latest" would skip what was published before it joined.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Never apply a record of an aborted producer transaction (franz-go's default reads them).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// franz-go rebalances in the background, even under a record in hand; this holds a revocation
		// until the batch is done (AllowRebalance before each poll), as kafka-clients revokes only
		// inside poll(): an offset is committed only while its partition is still ours.
		kgo.BlockRebalanceOnPoll(),
		// franz-go has no max.poll.interval.ms (it heartbeats from its own goroutine, so a stalled
		// handler is never evicted by itself). The nearest setting is the rebalance timeout, which
		// kafka-clients also sets from max.poll.interval.ms: how long a member may take to rejoin
		// once a rebalance has begun. The eviction itself is the watchdog's below.
		kgo.RebalanceTimeout(s.MaxPollInterval),
		kgo.WithLogger(kgo.BasicLogger(os.Stdout, kgo.LogLevelWarn, func() string { // warnings are enough here
			return time.Now().Format("2006/01/02 15:04:05.000000 ")
		})),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { logPartitions("assigned", m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { logPartitions("lost", m) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, m map[string][]int32) {
			logPartitions("revoked", m)
			if onRevoke != nil {
				onRevoke(ctx, c)
			}
		}),
	}
	if s.GroupProtocol == "consumer" {
		// KIP-848: the broker assigns ("uniform", as kafka-clients asks by default); the session and
		// heartbeat are the group's, set on the broker, so the client's are not sent.
		return append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	}
	// No heartbeat for this long and the coordinator evicts the member (M1 shortens it: a kill is seen in seconds).
	if s.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(s.SessionTimeout))
	}
	// Heartbeats well inside the session: a third of it unless the harness says otherwise.
	if beat := s.HeartbeatInterval; beat > 0 || s.SessionTimeout > 0 {
		if beat == 0 {
			beat = s.SessionTimeout / 3
		}
		opts = append(opts, kgo.HeartbeatInterval(beat))
	}
	return opts
}

// Consume runs the group's sessions until stopped (nil) or `each` returns an error (a lost
// database). `each` takes one record to its outcome and commits it; `own` is the commit policy,
// onRevoke what a revocation commits. A session the watchdog evicted ends after the record in
// hand, and a new one joins: the rejoin kafka-clients and librdkafka make on the next poll.
func Consume(s Settings, stop context.Context, program string, onRevoke func(context.Context, *kgo.Client),
	each func(*kgo.Client, *kgo.Record) error, own ...kgo.Opt) error {
	for stop.Err() == nil {
		client, err := kgo.NewClient(append(options(s, program, onRevoke), own...)...)
		if err != nil {
			return err
		}
		err = session(stop, client, s.MaxPollInterval, each)
		client.CloseAllowingRebalance() // leaves the group: its partitions move now, not after the session timeout
		if err != nil {
			return err
		} else if stop.Err() == nil {
			log.Print("rejoining the group after the eviction")
		}
	}
	return nil
}

func session(stop context.Context, client *kgo.Client, maxPoll time.Duration, each func(*kgo.Client, *kgo.Record) error) error {
	// max.poll.interval.ms, which franz-go lacks: a batch held past it makes the member leave the
	// group, as kafka-clients' heartbeat thread and librdkafka do, so its partitions move on while
	// the stalled handler still runs (M2's zombie). Armed while a batch is in hand.
	var evicted atomic.Bool
	evict := func() {
		evicted.Store(true)
		// "MAXPOLL [name#consumer-N]" is the token the lab counts evictions by (lab/logs.py).
		log.Printf("MAXPOLL [%s#consumer-1] max.poll.interval.ms (%d ms) exceeded by the batch in hand: "+
			"leaving the group", client.OptValue(kgo.ClientID), maxPoll.Milliseconds())
		client.AllowRebalance()           // the leave waits for the batch's rebalance block, which the stall holds
		_ = client.LeaveGroupContext(nil) // nil: leave in the background, this goroutine does not wait
	}
	var watchdog *time.Timer
	defer func() {
		if watchdog != nil {
			watchdog.Stop()
		}
	}()
	for {
		if watchdog != nil && !watchdog.Stop() {
			return nil // it fired since the last poll: the member left, this session is over
		}
		client.AllowRebalance() // between batches: a revocation may run now, with nothing in hand
		fetches := client.PollRecords(stop, MaxPollRecords)
		if stop.Err() != nil {
			return nil
		}
		if watchdog == nil {
			watchdog = time.AfterFunc(maxPoll, evict)
		} else {
			watchdog.Reset(maxPoll)
		}
		fetches.EachError(func(t string, p int32, err error) { log.Printf("fetch from %s/%d failed: %v", t, p, err) })
		if fetches.Empty() && fetches.Err() != nil {
			Pause(stop, time.Second)
		}
		for _, r := range fetches.Records() {
			if err := each(client, r); err != nil && !errors.Is(err, ErrStopped) {
				return err // the database is lost: nothing more, and nothing past this record
			} else if err != nil || stop.Err() != nil || evicted.Load() {
				return nil
			}
		}
	}
}

// logPartitions logs "partitions assigned|revoked|lost: 0,1" (the lab's format) as ownership changes.
func logPartitions(what string, taken map[string][]int32) {
	listed := "none"
	for _, partitions := range taken { // one topic
		if len(partitions) > 0 {
			listed = strings.Trim(strings.ReplaceAll(fmt.Sprint(partitions), " ", ","), "[]")
		}
	}
	log.Printf("partitions %s: %s", what, listed)
}

// Stopping is canceled on SIGTERM or SIGINT: the record in hand finishes, then the client leaves.
func Stopping() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		log.Print("stopping: the record in hand finishes, then the consumer leaves the group")
	}()
	return ctx
}

// Pause sleeps, or returns false at once if the consumer is asked to stop.
func Pause(stop context.Context, d time.Duration) bool {
	select {
	case <-stop.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// Poison is a message no retry can fix; its text is the dead letter's reason.
type Poison string

func (p Poison) Error() string { return string(p) }

// Credit is one credit as a message carries it: the event_id header, {"account_id", "amount"}.
type Credit struct {
	EventID   string
	AccountID int32
	Amount    int64
}

// CreditOf reads a record's credit, or a Poison saying why it carries none.
func CreditOf(r *kgo.Record) (Credit, error) {
	var raw []byte
	seen := 0
	for _, h := range r.Headers {
		if h.Key == "event_id" {
			raw, seen = h.Value, seen+1
		}
	}
	switch {
	case seen > 1:
		return Credit{}, Poison("more than one event_id header: which one to dedup on?")
	case len(raw) == 0 || !utf8.Valid(raw):
		return Credit{}, Poison("no event_id header (missing, empty or not UTF-8)")
	case bytes.IndexByte(raw, 0) >= 0:
		return Credit{}, Poison("event_id contains a NUL byte, which Postgres text cannot hold")
	case len(raw) > maxEventIDBytes:
		return Credit{}, Poison(fmt.Sprintf("event_id is longer than %d bytes", maxEventIDBytes))
	}
	if len(r.Value) == 0 {
		return Credit{}, Poison("value is empty")
	}
	var event map[string]json.RawMessage // refuses "{...} junk" too: that is not a credit
	if err := json.Unmarshal(r.Value, &event); err != nil {
		var wrongType *json.UnmarshalTypeError
		if errors.As(err, &wrongType) {
			return Credit{}, Poison("value is JSON " + wrongType.Value + ", not an object")
		}
		return Credit{}, Poison("value is not JSON: " + err.Error())
	} else if event == nil {
		return Credit{}, Poison("value is JSON null, not an object")
	}
	account, err := integer(event, "account_id", 1, 1<<31-1)
	if err != nil {
		return Credit{}, err
	}
	amount, err := integer(event, "amount", 1, maxAmount) // a credit is positive; the sum stays in bigint
	return Credit{string(raw), int32(account), amount}, err
}

func integer(event map[string]json.RawMessage, name string, low, high int64) (int64, error) {
	field, ok := event[name]
	if !ok {
		return 0, Poison("event has no " + name)
	}
	n, err := strconv.ParseInt(string(field), 10, 64) // 1.0, 1e3, "1", true and null are not integers
	if errors.Is(err, strconv.ErrSyntax) {
		return 0, Poison(fmt.Sprintf("%s must be an integer, got %.40s", name, field))
	} else if err != nil || n < low || n > high {
		return 0, Poison(fmt.Sprintf("%s %s is outside %d..%d", name, field, low, high))
	}
	return n, nil
}

// Execer is a connection or a transaction: the credit runs in either.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Apply is the side effect: an increment, so run twice it credits twice.
func Apply(ctx context.Context, db Execer, c Credit) error {
	tag, err := db.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", c.Amount, c.AccountID)
	if err == nil && tag.RowsAffected() == 0 { // a credit to no account is poison, not a silent no-op
		return Poison(fmt.Sprintf("unknown account %d", c.AccountID))
	}
	if err == nil {
		_, err = db.Exec(ctx, "INSERT INTO ledger (event_id, account_id, amount) VALUES ($1, $2, $3)",
			c.EventID, c.AccountID, c.Amount)
	}
	return err
}

// sqlClass is a database error's SQLSTATE class; "" if the server sent none (a lost connection).
func sqlClass(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		return pgErr.Code[:2]
	}
	return ""
}

// Refused: a data exception or an integrity violation (SQLSTATE 22, 23), the message's fault: poison.
// Every other database error but a retryable one (Retrying) stops the consumer, exit 1: the
// connection is lost, or the setup is wrong, and no offset may move past the record in hand.
func Refused(err error) bool { return sqlClass(err) == "22" || sqlClass(err) == "23" }

// CommitFailed logs a failed offset commit as the lab counts it, "offset commit failed: CODE".
func CommitFailed(err error) {
	code, kafkaErr := "CLIENT_ERROR", (*kerr.Error)(nil)
	if errors.As(err, &kafkaErr) {
		code = kafkaErr.Message
	}
	log.Printf("offset commit failed: %s (%v)", code, err)
}

// ErrStopped: a signal came while something waited for a retry (the record in hand: its offset stays).
var ErrStopped = errors.New("stopped while waiting to retry")

// ErrUnavailable marks an error worth waiting out (the DLQ's broker away): the record is tried again.
var ErrUnavailable = errors.New("unavailable")

// Retryable: the record in hand may be tried again, the DLQ away or SQLSTATE 40 (a serialization
// failure or deadlock, on a live connection).
func Retryable(err error) bool { return errors.Is(err, ErrUnavailable) || sqlClass(err) == "40" }

var oneLine = strings.NewReplacer(":\n\t", ": ", "\n\t", "; ") // pgx: a line per address tried

// Retry runs f until it returns nil or an error `retryable` refuses, backing off from 200 ms to 5 s
// between tries with a line that says what waits; ErrStopped if a signal comes first.
func Retry(stop context.Context, what string, retryable func(error) bool, f func() error) error {
	for delay := 200 * time.Millisecond; ; delay = min(delay*2, 5*time.Second) {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		log.Printf("%s, retrying in %.1fs: %s", what, delay.Seconds(), oneLine.Replace(err.Error()))
		if !Pause(stop, delay) {
			return ErrStopped
		}
	}
}

// Connect opens the consumer's one connection (CONSUMER_DSN, or libpq's PG* variables, which pgx
// reads too), waiting while the server refuses it for now (starting, restarting, full); a wrong
// password, role or database (SQLSTATE 28, 3D) fails at once.
func Connect(stop context.Context, program string) (conn *pgx.Conn, err error) {
	config, err := pgx.ParseConfig(os.Getenv("CONSUMER_DSN"))
	if err != nil {
		return nil, err
	}
	config.ConnectTimeout = 10 * time.Second
	config.RuntimeParams["application_name"] = program
	err = Retry(stop, "database refused the first connection", func(err error) bool {
		return sqlClass(err) != "28" && sqlClass(err) != "3D"
	}, func() (err error) {
		conn, err = pgx.ConnectConfig(stop, config)
		return err
	})
	return conn, err
}
