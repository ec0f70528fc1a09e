/** The signed-in session: restored from the cookie on load (`GET /session`), opened with an API key (`POST
 * /session`), closed with `DELETE /session`. The CSRF token lives in this React state only; the API key is never
 * kept anywhere. */

import { useQueryClient } from "@tanstack/react-query";
import { createContext, useCallback, useContext, useEffect, useMemo, useState } from "react";
import type { ReactNode } from "react";
import { createApi, unwrap } from "../api/client";
import type { Api } from "../api/client";
import { ApiError } from "../api/problem";
import type { User } from "../api/types";

export type AuthState =
  | { status: "loading" }
  | { status: "signed-out"; notice: string | null }
  | { status: "signed-in"; user: User; csrfToken: string; expiresAt: string };

interface AuthValue {
  state: AuthState;
  signIn: (apiKey: string) => Promise<void>;
  signOut: () => Promise<void>;
  /** The API refused the cookie (401): the session is over. */
  expire: () => void;
  api: Api;
  csrfToken: string | null;
}

const AuthContext = createContext<AuthValue | null>(null);

/** A client for the session routes before there is a session (no CSRF token yet, a 401 is an answer). */
function anonymous(): Api {
  return createApi(() => null);
}

export function AuthProvider({ children }: { children: ReactNode }) {
  const [state, setState] = useState<AuthState>({ status: "loading" });
  const queryClient = useQueryClient();
  const csrfToken = state.status === "signed-in" ? state.csrfToken : null;

  const expire = useCallback(() => {
    setState((current) =>
      current.status === "signed-in"
        ? { status: "signed-out", notice: "Your session has ended. Sign in again." }
        : current,
    );
    queryClient.clear();
  }, [queryClient]);

  useEffect(() => {
    let live = true;
    unwrap(anonymous().GET("/api/v1/session"))
      .then((session) => {
        if (live) setState({ status: "signed-in", user: session.user, csrfToken: session.csrf_token, expiresAt: session.expires_at });
      })
      .catch((error: unknown) => {
        if (!live) return;
        const notice = error instanceof ApiError && error.status === 401 ? null : "The service did not answer; sign in to try again.";
        setState({ status: "signed-out", notice });
      });
    return () => {
      live = false;
    };
  }, []);

  const signIn = useCallback(async (apiKey: string) => {
    const session = await unwrap(anonymous().POST("/api/v1/session", { body: { api_key: apiKey } }));
    queryClient.clear();
    setState({ status: "signed-in", user: session.user, csrfToken: session.csrf_token, expiresAt: session.expires_at });
  }, [queryClient]);

  const api = useMemo(() => createApi(() => csrfToken, expire), [csrfToken, expire]);

  const signOut = useCallback(async () => {
    try {
      await unwrap(api.DELETE("/api/v1/session"));
    } catch {
      // signed out here whatever the API answered: an ended session is signed out too
    } finally {
      queryClient.clear();
      setState({ status: "signed-out", notice: "You are signed out." });
    }
  }, [api, queryClient]);

  const value = useMemo(() => ({ state, signIn, signOut, expire, api, csrfToken }), [state, signIn, signOut, expire, api, csrfToken]);
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}

export function useAuth(): AuthValue {
  const value = useContext(AuthContext);
  if (value === null) throw new Error("useAuth outside AuthProvider");
  return value;
}

/** The typed API client of the current session. */
export function useApi(): Api {
  return useAuth().api;
}
