package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/roster-go/roster/registry/driver"
)

// Records are ConfigMaps in the driver's namespace, one per record,
// named by a hash of the key (keys hold '/' and may be longer than a
// name), with the key in an annotation and the value as binaryData, and
// labelled so that one selector finds them all. Discovery reads
// EndpointSlices and Leases only, so a record is never an instance or a
// service. A record's Version is its ConfigMap's resourceVersion: the
// apiserver changes it on every write and never hands it out again.

var _ driver.Store = (*Driver)(nil)

const (
	labelRecord      = "roster.dev/record"   // "true" on every record's ConfigMap
	annotationRecord = "roster.dev/key"      // the record's key
	recordDataKey    = "value"               // binaryData key of the value
	recordSelector   = labelRecord + "=true" // the ConfigMaps of records
)

// recordObjectName is the name of the ConfigMap that holds the record at
// key: a hash, since keys may hold characters names may not.
func recordObjectName(key string) string {
	h := sha256.Sum256([]byte(key))
	return "roster-record-" + hex.EncodeToString(h[:10])
}

// configMapRecord returns the record a ConfigMap holds, or false for one
// that holds none (no key annotation: not written by Roster).
func configMapRecord(cm *corev1.ConfigMap) (driver.Record, bool) {
	key, ok := cm.Annotations[annotationRecord]
	if !ok || cm.Name != recordObjectName(key) {
		return driver.Record{}, false
	}
	return driver.Record{Key: key, Value: cm.BinaryData[recordDataKey], Version: cm.ResourceVersion}, true
}

func (d *Driver) recordConfigMap(key string, value []byte, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            recordObjectName(key),
			Namespace:       d.ns,
			ResourceVersion: rv,
			Labels:          map[string]string{labelRecord: "true", labelLeaseManagedBy: "roster"},
			Annotations:     map[string]string{annotationRecord: key},
		},
		BinaryData: map[string][]byte{recordDataKey: value},
	}
}

func recordConflict(key string) error {
	return fmt.Errorf("k8s: record %s: %w", key, driver.ErrConflict)
}

func recordNotFound(key string) error {
	return fmt.Errorf("k8s: record %s: %w", key, driver.ErrNotFound)
}

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	c, cancel := d.call(ctx)
	defer cancel()
	cm, err := d.cs.CoreV1().ConfigMaps(d.ns).Get(c, recordObjectName(key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return driver.Record{}, recordNotFound(key)
	}
	if err != nil {
		return driver.Record{}, wrap("get record "+key, err)
	}
	rec, ok := configMapRecord(cm)
	if !ok || rec.Key != key {
		return driver.Record{}, recordNotFound(key)
	}
	return rec, nil
}

// ListRecords implements driver.Store with one list of the labelled
// ConfigMaps, filtered by key.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	c, cancel := d.call(ctx)
	defer cancel()
	recs, _, err := d.listRecords(c, prefix)
	if err != nil {
		return nil, wrap("list records "+prefix, err)
	}
	return recs, nil
}

func (d *Driver) listRecords(ctx context.Context, prefix string) ([]driver.Record, string, error) {
	l, err := d.cs.CoreV1().ConfigMaps(d.ns).List(ctx, metav1.ListOptions{LabelSelector: recordSelector})
	if err != nil {
		return nil, "", err
	}
	out := []driver.Record{}
	for i := range l.Items {
		if rec, ok := configMapRecord(&l.Items[i]); ok && strings.HasPrefix(rec.Key, prefix) {
			out = append(out, rec)
		}
	}
	return out, l.ResourceVersion, nil
}

// PutRecord implements driver.Store: a create for VersionAbsent, an
// update at the resourceVersion for a version, and for "" an update
// without one (ConfigMaps allow it), or a create where there is none.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	c, cancel := d.call(ctx)
	defer cancel()
	api := d.cs.CoreV1().ConfigMaps(d.ns)
	var cm *corev1.ConfigMap
	var err error
	switch ifVersion {
	case driver.VersionAbsent:
		cm, err = api.Create(c, d.recordConfigMap(key, value, ""), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return driver.Record{}, recordConflict(key)
		}
	case "":
		for {
			cm, err = api.Update(c, d.recordConfigMap(key, value, ""), metav1.UpdateOptions{})
			if !apierrors.IsNotFound(err) {
				break
			}
			if cm, err = api.Create(c, d.recordConfigMap(key, value, ""), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
				break
			}
		}
	default:
		cm, err = api.Update(c, d.recordConfigMap(key, value, ifVersion), metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) && strings.Contains(err.Error(), "resourceVersion") {
			return driver.Record{}, recordConflict(key)
		}
	}
	if err != nil {
		return driver.Record{}, wrap("put record "+key, err)
	}
	return driver.Record{Key: key, Value: value, Version: cm.ResourceVersion}, nil
}

// DeleteRecord implements driver.Store like PutRecord, a version being a
// precondition of the delete.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	c, cancel := d.call(ctx)
	defer cancel()
	api := d.cs.CoreV1().ConfigMaps(d.ns)
	name := recordObjectName(key)
	switch ifVersion {
	case "":
		err := api.Delete(c, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return wrap("delete record "+key, err)
		}
		return nil
	case driver.VersionAbsent:
		_, err := api.Get(c, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return recordConflict(key)
		case apierrors.IsNotFound(err):
			return nil
		}
		return wrap("delete record "+key, err)
	}
	v := ifVersion
	err := api.Delete(c, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &v}})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return recordConflict(key)
	}
	if err != nil {
		return wrap("delete record "+key, err)
	}
	return nil
}

// WatchRecords implements driver.Store: a list of the labelled
// ConfigMaps, then a watch from its resourceVersion; a watch that ends or
// fails (expired resourceVersion, apiserver restart) lists again.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return &recordStream{d: d, prefix: prefix, parent: sctx, cancel: cancel}, nil
}

type recordStream struct {
	d      *Driver
	prefix string
	parent context.Context
	cancel context.CancelFunc

	mu     sync.Mutex      // guards w and closed: Close may come from another goroutine
	w      watch.Interface // nil: list first
	closed bool
	state  map[string]driver.Record
}

// Close stops the watch: its decoder would otherwise block on a result
// nobody reads. Stop does not wait on the network.
func (s *recordStream) Close() error {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.stopLocked()
	return nil
}

func (s *recordStream) closedErr() error {
	return fmt.Errorf("k8s: watch records %s: %w", s.prefix, driver.ErrClosed)
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	for {
		if s.parent.Err() != nil {
			s.stop()
			return nil, s.closedErr()
		}
		s.mu.Lock()
		w := s.w
		s.mu.Unlock()
		if w == nil {
			if err := s.relist(ctx); err != nil {
				return nil, err
			}
			return s.records(), nil
		}
		select {
		case <-s.parent.Done():
			s.stop()
			return nil, s.closedErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				s.stop() // list again
				continue
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM {
				continue // a bookmark
			}
			rec, ok := configMapRecord(cm)
			if !ok || !strings.HasPrefix(rec.Key, s.prefix) {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(s.state, rec.Key)
			} else {
				s.state[rec.Key] = rec
			}
			return s.records(), nil
		}
	}
}

func (s *recordStream) relist(ctx context.Context) error {
	c, cancel := context.WithTimeout(ctx, s.d.reqT)
	defer cancel()
	stop := context.AfterFunc(s.parent, cancel)
	defer stop()
	recs, rv, err := s.d.listRecords(c, s.prefix)
	if err != nil {
		if s.parent.Err() != nil {
			return s.closedErr()
		}
		return wrap("watch records "+s.prefix+": list", err)
	}
	s.state = make(map[string]driver.Record, len(recs))
	for _, r := range recs {
		s.state[r.Key] = r
	}
	// The watch's own timeout keeps it from waiting forever on a silent
	// connection: it ends, and the stream lists again.
	timeout := int64(recordWatchTimeout / time.Second)
	w, err := s.d.cs.CoreV1().ConfigMaps(s.d.ns).Watch(s.parent, metav1.ListOptions{
		LabelSelector: recordSelector, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
	})
	if err != nil {
		if s.parent.Err() != nil {
			return s.closedErr()
		}
		return wrap("watch records "+s.prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		w.Stop()
		return s.closedErr()
	}
	s.w = w
	return nil
}

// recordWatchTimeout is how long one watch request lasts before the
// stream lists again.
const recordWatchTimeout = 5 * time.Minute

func (s *recordStream) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *recordStream) stopLocked() {
	if s.w != nil {
		s.w.Stop()
		s.w = nil
	}
}

func (s *recordStream) records() []driver.Record {
	out := make([]driver.Record, 0, len(s.state))
	for _, r := range s.state {
		out = append(out, r)
	}
	return out
}
