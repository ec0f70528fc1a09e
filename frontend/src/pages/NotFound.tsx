import { Link } from "react-router";
import { useTitle } from "../lib/useTitle";

export default function NotFoundPage() {
  useTitle("Not found");
  return (
    <>
      <h1>Not found</h1>
      <p>
        Nothing lives at this address. Go to <Link to="/jobs">your jobs</Link>.
      </p>
    </>
  );
}
