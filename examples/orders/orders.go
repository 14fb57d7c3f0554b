package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
)

// The order service: CreateOrder writes the order and its event in one
// transaction, and POST /orders exposes it.

// Order is what the order service stores.
type Order struct {
	ID         uuid.UUID `json:"id"`
	CustomerID string    `json:"customer_id"`
	Total      float64   `json:"total"`
}

// OrderCreated is the order.created event's payload.
type OrderCreated struct {
	OrderID    uuid.UUID `json:"order_id"`
	CustomerID string    `json:"customer_id"`
	Total      float64   `json:"total"`
}

// OrderService writes orders and their events. Its pool's search_path is the
// service's schema, so its own SQL is unqualified.
type OrderService struct {
	pool   *pgxpool.Pool
	outbox *outbox.Writer
	relay  *outbox.Relay // woken after each commit so the event leaves at once
}

// CreateOrder saves the order and its order.created event in one
// transaction. There is no publish call: the relay does that.
func (s *OrderService) CreateOrder(ctx context.Context, o Order) error {
	return s.createOrder(ctx, o, false)
}

// errRolledBack ends a transaction the story rolls back on purpose.
var errRolledBack = errors.New("rolled back on purpose")

// createOrder is CreateOrder; with rollback it rolls the transaction back
// after both inserts, so the event goes with the order.
func (s *OrderService) createOrder(ctx context.Context, o Order, rollback bool) error {
	payload, err := outbox.JSONPayload(OrderCreated{OrderID: o.ID, CustomerID: o.CustomerID, Total: o.Total})
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, now())`,
			o.ID, o.CustomerID, o.Total); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if _, err := s.outbox.Write(ctx, tx, outbox.Event{
			AggregateType: "order", AggregateID: o.ID.String(), EventType: "order.created", Payload: payload,
		}); err != nil {
			return err
		}
		if rollback {
			return errRolledBack
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.relay.Wake() // the relay is in this process: no need to wait for its poll
	return nil
}

// ServeHTTP handles POST /orders with {"customer_id": "...", "total": 12.5}
// and answers 201 with the order.
func (s *OrderService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var o Order
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		http.Error(w, "invalid order: "+err.Error(), http.StatusBadRequest)
		return
	}
	if o.CustomerID == "" || o.Total <= 0 {
		http.Error(w, "invalid order: customer_id and a positive total are required", http.StatusBadRequest)
		return
	}
	o.ID = uuid.Must(uuid.NewV7())
	if err := s.CreateOrder(r.Context(), o); err != nil {
		var ve *outbox.ValidationError
		if errors.As(err, &ve) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Error(w, "could not create the order", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(o)
}
