package main

import (
	"context"
	"errors"
)

// cmdDev runs the gateway, dashboard and example functions on a private Postgres.
func cmdDev(ctx context.Context, args []string) error { return errors.New("dev: not wired yet") }

// cmdServe runs the gateway against DATABASE_URL.
func cmdServe(ctx context.Context, args []string) error { return errors.New("serve: not wired yet") }

// cmdMigrate applies the migrations to DATABASE_URL.
func cmdMigrate(ctx context.Context, args []string) error { return errors.New("migrate: not wired yet") }
