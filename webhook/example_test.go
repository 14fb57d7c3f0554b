package webhook_test

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/webhook"
)

func ExampleNew() {
	var pool *pgxpool.Pool // your application's pool
	pub, err := webhook.New(webhook.Config{
		URL:     "https://hooks.example.com/outbox/{event_type}",
		Secrets: []string{os.Getenv("WEBHOOK_SECRET")}, // whsec_...
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay // relay.Run(ctx)
}

// A receiver checks the signature before trusting the body. This is the
// Standard Webhooks specification's example request.
func ExampleVerifyAt() {
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	received := time.Unix(1614265330, 0).Add(3 * time.Second)

	fmt.Println(webhook.VerifyAt(received, secrets, h, body, 5*time.Minute))
	fmt.Println(webhook.VerifyAt(received, secrets, h, []byte(`{"test": 1}`), 5*time.Minute))
	fmt.Println(webhook.VerifyAt(received.Add(time.Hour), secrets, h, body, 5*time.Minute))
	// Output:
	// <nil>
	// webhook: no matching signature
	// webhook: timestamp outside the tolerance: 1h0m3s off the receiver's clock (tolerance 5m0s)
}
